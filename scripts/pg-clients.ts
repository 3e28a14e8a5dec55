// Which PostgreSQL client (issue 13, point 1): node-postgres (`pg`, the service's) against
// postgres.js (`postgres`, which pipelines queries on a connection), on the store's own
// statements, without HTTP. For each client: exact int8 both ways as bigint, the SQLSTATE of a
// unique violation, recovery after pg_terminate_backend of its connections (idle, and under
// load), what a write waiting on a row lock does to the reads beside it; then throughput of 64 concurrent callers, in rounds whose order rotates.
// Usage: BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres node --import tsx scripts/pg-clients.ts
// Settings: BENCH_SECONDS (5 measured, after 1 s warm-up)  BENCH_ROUNDS (5)  BENCH_CONNECTIONS (64 callers)
// It works in a schema of its own (pgclients_…), dropped at the end.
import { randomBytes } from 'node:crypto'
import { cpus, loadavg } from 'node:os'
import { setTimeout as sleep } from 'node:timers/promises'
import pg from 'pg'
import { queryOnce } from './postgres-query.js'
import postgres from 'postgres'
import { PostgresStore } from '../src/store/postgres.js'

interface Row { id: bigint, name: string, tag: string | null }

/** One contender: the store's statements through one client configuration. */
interface Client {
  /** The store's create insert; true when it inserted. */
  create (id: bigint, name: string, tag: string): Promise<boolean>
  get (id: bigint): Promise<Row | undefined>
  /** The first page: limit + 1 rows, as the store reads them. */
  page (limit: number): Promise<Row[]>
  /** A plain insert, no ON CONFLICT: a duplicate id fails with 23505. */
  insertPlain (id: bigint): Promise<void>
  /** `SELECT $1::int8`: the parameter goes out and comes back. */
  echo (id: bigint): Promise<unknown>
  /** The store's replace: an UPDATE of one row (here to the same name). */
  update (id: bigint): Promise<void>
  close (): Promise<void>
}

type Statement = 'create' | 'get' | 'list'

const SEED_COUNT = 10_000
const SQL = {
  create: 'INSERT INTO plants (id, name, tag) VALUES ($1::int8, $2, $3) ON CONFLICT (id) DO NOTHING',
  get: 'SELECT id, name, tag FROM plants WHERE id = $1::int8',
  page: 'SELECT id, name, tag FROM plants ORDER BY id LIMIT $1',
  plain: 'INSERT INTO plants (id, name) VALUES ($1::int8, \'plain\')',
  echo: 'SELECT $1::int8 AS v',
  update: 'UPDATE plants SET name = name WHERE id = $1::int8'
}
const INT8_CHECKS = [-(2n ** 63n), 2n ** 63n - 1n, 2n ** 53n + 1n]

const url = process.env.BENCH_DATABASE_URL ?? ''
const seconds = Number(process.env.BENCH_SECONDS ?? 5)
const rounds = Number(process.env.BENCH_ROUNDS ?? 5)
const callers = Number(process.env.BENCH_CONNECTIONS ?? 64)
const schema = `pgclients_${randomBytes(4).toString('hex')}`

/** int8 as bigint on pg's side, as the store sets it: on these connections only. */
const PG_TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === 20 ? (value: string) => BigInt(value) : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser']
}

/** node-postgres as the store uses it (ids sent as text, cast ::int8); `named` adds a statement name: prepared once per connection. */
function pgClient (max: number, named: boolean, app: string): Client {
  const pool = new pg.Pool({ connectionString: url, max, types: PG_TYPES, application_name: app, options: `-c search_path=${schema}` })
  pool.on('error', () => {}) // an idle connection ended by the server: the pool drops it
  const query = async <R extends pg.QueryResultRow>(name: string, text: string, values: unknown[]): Promise<pg.QueryResult<R>> =>
    await pool.query<R>(named ? { name, text, values } : { text, values })
  return {
    create: async (id, name, tag) => (await query('create', SQL.create, [id.toString(), name, tag])).rowCount === 1,
    get: async (id) => (await query<Row>('get', SQL.get, [id.toString()])).rows[0],
    page: async (limit) => (await query<Row>('page', SQL.page, [limit + 1])).rows,
    insertPlain: async (id) => { await query('plain', SQL.plain, [id.toString()]) },
    echo: async (id) => (await query<{ v: unknown }>('echo', SQL.echo, [id.toString()])).rows[0].v,
    update: async (id) => { await query('update', SQL.update, [id.toString()]) },
    close: async () => { await pool.end() }
  }
}

/** postgres.js with int8 as bigint both ways (postgres.BigInt), and its defaults: prepared statements, pipelining. */
function postgresJsClient (max: number, app: string): Client {
  const sql = postgres(url, { max, types: { bigint: postgres.BigInt }, connection: { application_name: app, search_path: schema }, onnotice: () => {} })
  return {
    create: async (id, name, tag) => (await sql`INSERT INTO plants (id, name, tag) VALUES (${id}::int8, ${name}, ${tag}) ON CONFLICT (id) DO NOTHING`).count === 1,
    get: async (id) => (await sql<Row[]>`SELECT id, name, tag FROM plants WHERE id = ${id}::int8`)[0],
    page: async (limit) => [...await sql<Row[]>`SELECT id, name, tag FROM plants ORDER BY id LIMIT ${limit + 1}`],
    insertPlain: async (id) => { await sql`INSERT INTO plants (id, name) VALUES (${id}::int8, 'plain')` },
    echo: async (id) => (await sql<Array<{ v: unknown }>>`SELECT ${id}::int8 AS v`)[0].v,
    update: async (id) => { await sql`UPDATE plants SET name = name WHERE id = ${id}::int8` },
    close: async () => { await sql.end({ timeout: 5 }) }
  }
}

const CONTENDERS: Record<string, (app: string) => Client> = {
  'pg Pool(10)': app => pgClient(10, false, app),
  'pg Pool(10), named statements': app => pgClient(10, true, app),
  'pg Pool(5)': app => pgClient(5, false, app),
  'pg Pool(20)': app => pgClient(20, false, app),
  'postgres.js max 10': app => postgresJsClient(10, app)
}

const admin = async (text: string, values: unknown[] = []): Promise<pg.QueryResult> => await queryOnce(url, text, values)

/** Ends the server sessions of one application_name; how many. */
async function terminate (app: string): Promise<number> {
  const { rows } = await admin('SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()', [app])
  return rows[0].n
}

function errorName (error: unknown): string {
  const { code, message } = error as { code?: string, message?: string }
  return `${code ?? 'no code'}: ${(message ?? String(error)).slice(0, 80)}`
}

let nextId = 10n ** 12n

/** Exactness, SQLSTATE and recovery for one client: a line per check. */
async function check (name: string, make: (app: string) => Client): Promise<Record<string, string>> {
  const app = `pgclients-${randomBytes(3).toString('hex')}`
  const client = make(app)
  const found: Record<string, string> = {}
  try {
    const int8 = []
    for (const id of INT8_CHECKS) {
      const echoed = await client.echo(id)
      await client.create(id, 'int8', 'check')
      const row = await client.get(id)
      int8.push(echoed === id && typeof echoed === 'bigint' && row?.id === id && typeof row.id === 'bigint' ? 'exact' : `NOT exact (${typeof echoed} ${String(echoed)}, ${typeof row?.id} ${String(row?.id)})`)
    }
    found['int8 −2^63, 2^63−1, 2^53+1 (echo and stored row, bigint)'] = int8.join(', ')
    try {
      await client.insertPlain(1n)
      found['duplicate id: err.code'] = 'no error'
    } catch (error) {
      found['duplicate id: err.code'] = String((error as { code?: string }).code)
    }
    await client.get(1n)
    const ended = await terminate(app)
    let first: string
    try {
      await client.get(1n)
      first = 'ok'
    } catch (error) {
      first = errorName(error)
    }
    const start = performance.now()
    let recovered = 'no: still failing after 5 s'
    while (performance.now() - start < 5000) {
      try {
        await client.get(1n)
        recovered = `yes, ${Math.round(performance.now() - start)} ms after the first query`
        break
      } catch { await sleep(50) }
    }
    found['idle connections ended: first query'] = `${first} (${ended} ended)`
    found['idle connections ended: recovered by itself'] = recovered
    found['under load, connections ended'] = await underLoad(client, app)
    found['a write waits 2 s on a row lock: reads beside it'] = await besideLockedWrite(client)
  } finally {
    await client.close().catch(() => {})
  }
  return found
}

/** 64 callers reading for 3 s; all the client's sessions ended at 1 s: errors and reads after. */
async function underLoad (client: Client, app: string): Promise<string> {
  const errors = new Map<string, number>()
  let after = 0
  let ended = false
  const end = performance.now() + 3000
  const killer = sleep(1000).then(async () => { await terminate(app); ended = true })
  await Promise.all(Array.from({ length: callers }, async () => {
    while (performance.now() < end) {
      try {
        await client.get(BigInt(1 + Math.floor(Math.random() * SEED_COUNT)))
        if (ended) after++
      } catch (error) {
        const key = errorName(error)
        errors.set(key, (errors.get(key) ?? 0) + 1)
        await sleep(10)
      }
    }
  }))
  await killer
  const listed = [...errors].map(([key, n]) => `${n} × ${key}`).join('; ')
  return `${listed === '' ? 'no errors' : listed}; ${after} reads succeeded in the 2 s after`
}

/**
 * Another session holds plant 1's row lock for 2 s while the client's UPDATE of it waits and 64
 * callers read other plants: how many reads waited behind the blocked write (over 1 s).
 */
async function besideLockedWrite (client: Client): Promise<string> {
  const holder = new pg.Client({ connectionString: url, options: `-c search_path=${schema}` })
  await holder.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT id FROM plants WHERE id = 1 FOR UPDATE')
    const started = performance.now()
    const blocked = client.update(1n).then(() => performance.now() - started)
    const release = sleep(2000).then(async () => { await holder.query('ROLLBACK') })
    const latencies: number[] = []
    const end = performance.now() + 1500
    await sleep(50) // the UPDATE is on its way first
    await Promise.all(Array.from({ length: callers }, async () => {
      while (performance.now() < end) {
        const t = performance.now()
        await client.get(BigInt(2 + Math.floor(Math.random() * (SEED_COUNT - 1))))
        latencies.push(performance.now() - t)
      }
    }))
    await release
    const waited = await blocked
    const slow = latencies.filter(ms => ms > 1000).length
    return `the write waited ${Math.round(waited)} ms; ${slow} of ${latencies.length} reads took over 1 s (longest ${Math.round(Math.max(...latencies))} ms)`
  } finally {
    await holder.end()
  }
}

interface Result { statement: Statement, round: number, contender: string, perSecond: number, p50Ms: number, p99Ms: number, cpuUsPerOp: number, errors: number }

function percentile (sorted: number[], p: number): number {
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]
}

async function drive (client: Client, statement: Statement, durationS: number): Promise<Omit<Result, 'statement' | 'round' | 'contender'>> {
  const op = {
    create: async () => { const id = nextId++; await client.create(id, `Plant ${id}`, 'bench') },
    get: async () => { await client.get(BigInt(1 + Math.floor(Math.random() * SEED_COUNT))) },
    list: async () => { await client.page(100) }
  }[statement]
  const latencies: number[] = []
  let errors = 0
  const cpu = process.cpuUsage()
  const start = performance.now()
  const end = start + durationS * 1000
  await Promise.all(Array.from({ length: callers }, async () => {
    while (performance.now() < end) {
      const t = performance.now()
      try {
        await op()
        latencies.push(performance.now() - t)
      } catch {
        errors++
      }
    }
  }))
  const elapsed = (performance.now() - start) / 1000
  const used = process.cpuUsage(cpu)
  latencies.sort((a, b) => a - b)
  return {
    perSecond: Math.round(latencies.length / elapsed),
    p50Ms: Math.round(percentile(latencies, 0.5) * 100) / 100,
    p99Ms: Math.round(percentile(latencies, 0.99) * 100) / 100,
    cpuUsPerOp: Math.round((used.user + used.system) / Math.max(1, latencies.length) * 10) / 10,
    errors
  }
}

function median (values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

function table (header: string[], rows: string[][]): string {
  return [header, header.map(() => '---'), ...rows].map(cells => `| ${cells.join(' | ')} |`).join('\n')
}

async function main (): Promise<void> {
  if (!/^postgres(ql)?:\/\//.test(url)) throw new Error('set BENCH_DATABASE_URL to a postgres:// URL (a schema of its own is made in that database and dropped)')
  await admin(`CREATE SCHEMA ${schema}`)
  try {
    const schemaUrl = `${url}${url.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
    await (await PostgresStore.open(schemaUrl)).close() // the service's own migrations make the tables
    await admin(`INSERT INTO ${schema}.plants (id, name, tag) SELECT i, 'Seed ' || i, 'seed' FROM generate_series(1, ${SEED_COUNT}) AS i`)
    await admin(`VACUUM ANALYZE ${schema}.plants`)

    const names = Object.keys(CONTENDERS)
    const checks: Record<string, Record<string, string>> = {}
    for (const name of names) checks[name] = await check(name, CONTENDERS[name])
    const keys = Object.keys(checks[names[0]])
    console.log(table(['check', ...names], keys.map(key => [key, ...names.map(name => checks[name][key])])))
    console.log('')

    const results: Result[] = []
    for (const statement of ['create', 'get', 'list'] as Statement[]) {
      for (let round = 1; round <= rounds; round++) {
        const shift = (round - 1) % names.length
        for (const contender of [...names.slice(shift), ...names.slice(0, shift)]) {
          const client = CONTENDERS[contender](`pgclients-${statement}`)
          try {
            await drive(client, statement, 1)
            const result = { statement, round, contender, ...await drive(client, statement, seconds) }
            results.push(result)
            process.stderr.write(`${statement} round ${round} ${contender}: ${result.perSecond}/s p99 ${result.p99Ms} ms, ${result.errors} errors\n`)
          } finally {
            await client.close()
          }
        }
      }
    }
    const rows = (['create', 'get', 'list'] as Statement[]).flatMap(statement => names.map(contender => {
      const mine = results.filter(r => r.statement === statement && r.contender === contender)
      const base = results.filter(r => r.statement === statement && r.contender === names[0])
      const ratios = mine.map(r => r.perSecond / (base.find(b => b.round === r.round)?.perSecond ?? Number.NaN))
      const perSecond = mine.map(r => r.perSecond)
      return [statement, contender, perSecond.join(' / '), String(median(perSecond)), median(ratios).toFixed(2), `${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}`,
        String(median(mine.map(r => r.p50Ms))), String(median(mine.map(r => r.p99Ms))), String(median(mine.map(r => r.cpuUsPerOp))), String(mine.reduce((n, r) => n + r.errors, 0))]
    }))
    console.log(table(['statement', 'client', 'per second, rounds', 'median', `÷ ${names[0]} (median)`, 'ratio range', 'p50 ms', 'p99 ms', 'client CPU µs/op', 'errors'], rows))
    console.log(`\n${callers} callers, ${rounds} rounds of 1 s warm-up + ${seconds} s, order rotated each round; ${cpus().length} CPUs; load average at the end ${loadavg().map(n => n.toFixed(2)).join(', ')}; ${process.version}`)
  } finally {
    await admin(`DROP SCHEMA ${schema} CASCADE`)
  }
}

await main()
