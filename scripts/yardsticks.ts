// The bench's yardsticks (issue 12): plain node:http servers doing only the work the contract
// requires of each scenario, so that the service's throughput can be read as a share of what
// Node can do on this machine. Run by scripts/bench.ts, compiled to plain JS, one process per
// yardstick; YARDSTICK picks which one:
//   ceiling  POST /plants with the contract's checks and no storage: the Authorization header
//            compared with the expected string, the content type checked, the body read (413
//            past 64 KiB), JSON.parse, NewPlant validated (id an integer in int64, name 1 to 200
//            characters, tag a string of at most 100), the answer {name, tag?}.
//   durable  the ceiling + storage: better-sqlite3, WAL, synchronous=FULL, on the main thread.
//            A turn's inserts run at setImmediate in one transaction, each create with its
//            entry in the change log (SPEC section 9: its position is the plant's version and
//            ETag; one process writes, so the head is kept in memory), and each answer leaves
//            after its commit (so the event loop blocks in every fsync). The id is unique: the
//            same plant again is 200, another one 409, as the contract says.
//   get      GET /plants/{id}: one point read on the main thread, answered {id, name, tag?}.
//   list     GET /plants?limit=N (1 to 1000): the page query on the main thread, N + 1 rows as
//            the service reads them to know whether more remain, answered as a JSON array of
//            N records and, when more remain, the Link header to the next page.
//   postgres all three routes on PostgreSQL (DATABASE_URL), with the service's client and pool
//            size (pg, 10 connections) and the store's statements (src/store/postgres.ts):
//            POST as the ceiling, then, as the store does, the creates of one turn in one insert
//            ON CONFLICT DO NOTHING (in autocommit: no change log) and, for an id it did not
//            insert, the read by id that tells the same plant (200) from another (409); GET
//            the read by id; the page the first-page query with limit + 1. Rows come as arrays
//            with int8 as pg's text, written into the JSON as they are: exact, and no BigInt.
//   postgres-js  the same with postgres.js (max 10, its prepared statements and pipelining)
//            in place of pg: what the service could gain by switching clients (issue 13).
// All answer GET /healthz (for the bench to wait on) without a token. None does the hardening
// the service owes (duplicate keys, nesting depth, lone surrogates and invalid UTF-8, charsets,
// rate limits, scopes, timeouts, caps on in-flight work, logging) nor any other route. The
// readers ask SQLite for plain numbers: exact for ids within ±2^53, as all the bench's are; ids
// beyond would need the service's bigint path. The int64 digits path for POST covers the
// top-level "id" only as the first "id" key of the text, which is enough for the bench's bodies.
import type Database from 'better-sqlite3'
import { createRequire } from 'node:module'
import pg from 'pg'
import postgresJs from 'postgres'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { readJsonText } from './yardstick-body.js'

const BODY_LIMIT = 64 * 1024
const INT64 = [-(2n ** 63n), 2n ** 63n - 1n]
const mode = process.env.YARDSTICK ?? ''
const token = process.env.YARDSTICK_TOKEN ?? ''
const database = process.env.DATABASE_PATH ?? process.env.DATABASE_URL ?? ''
// The bench knows the one token in advance, so the cheapest check the contract allows is to
// compare the whole header with one string. The service must look tokens up and compare in
// constant time because its secrets are real; a ceiling pays for neither.
const expected = `Bearer ${token}`

interface NewPlant { id: number | bigint, name: string, tag?: string }

function send (response: ServerResponse, status: number, text: string, headers: Record<string, string> = {}): void {
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': String(Buffer.byteLength(text)), ...headers })
  response.end(text)
}

function fail (response: ServerResponse, status: number, message: string): void {
  send(response, status, JSON.stringify({ error: status, message }), status === 401 ? { 'www-authenticate': 'Bearer' } : {})
}

function answerPlant (response: ServerResponse, plant: NewPlant, headers: Record<string, string> = {}): void {
  send(response, 200, JSON.stringify(plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag }), headers)
}

/** JSON.parse's number when it is exact; past 2^53 the id's digits, read from the text, as a bigint. */
function idOf (value: unknown, text: string): number | bigint | undefined {
  if (Number.isSafeInteger(value)) return value as number
  if (typeof value !== 'number' || !Number.isInteger(value)) return undefined
  const digits = /"id"\s*:\s*(-?\d+)\s*[,}]/.exec(text)?.[1]
  const id = digits === undefined ? undefined : BigInt(digits)
  return id !== undefined && id >= INT64[0] && id <= INT64[1] ? id : undefined
}

/** Characters are code points: counted only when UTF-16 units exceed the bound. */
function longerThan (text: string, max: number): boolean {
  return text.length > max && [...text].length > max
}

function newPlantOf (text: string): NewPlant | undefined {
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    return undefined
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined
  const { id, name, tag } = body as Record<string, unknown>
  const exact = idOf(id, text)
  if (exact === undefined || typeof name !== 'string' || name.length === 0 || longerThan(name, 200)) return undefined
  if (tag === undefined) return { id: exact, name }
  return typeof tag === 'string' && !longerThan(tag, 100) ? { id: exact, name, tag } : undefined
}

/** Content type, body and NewPlant checked; `accept` gets the plant, or the failure is answered. */
function readPlant (request: IncomingMessage, response: ServerResponse, accept: (plant: NewPlant) => void): void {
  readJsonText(request, response, BODY_LIMIT, fail, text => {
    const plant = newPlantOf(text)
    if (plant === undefined) return fail(response, 400, 'The request body is not a valid NewPlant.')
    accept(plant)
  })
}

/** The SQLite binding that scripts/bench.ts names (src/store/sqlite-driver.ts picks it for the Node in use). */
const Binding: typeof Database = createRequire(import.meta.url)(process.env.SQLITE_BINDING ?? 'better-sqlite3')

function open (): Database.Database {
  const db = new Binding(database)
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = FULL')
  db.exec('CREATE TABLE IF NOT EXISTS plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tag TEXT, version INTEGER NOT NULL DEFAULT 1)')
  return db
}

type Handler = (request: IncomingMessage, response: ServerResponse) => void

function ceiling (): Handler {
  return (request, response) => {
    if (request.method !== 'POST' || request.url !== '/plants') return fail(response, 404, 'There is no such route.')
    readPlant(request, response, plant => answerPlant(response, plant))
  }
}

function durable (): Handler {
  const db = open()
  db.exec('CREATE TABLE IF NOT EXISTS changes (position INTEGER PRIMARY KEY, type TEXT NOT NULL, plant_id INTEGER NOT NULL, name TEXT NOT NULL, tag TEXT, at INTEGER NOT NULL)')
  const insert = db.prepare('INSERT INTO plants (id, name, tag, version) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING')
  const log = db.prepare('INSERT INTO changes (position, type, plant_id, name, tag, at) VALUES (?, \'plant.created\', ?, ?, ?, ?)')
  const stored = db.prepare('SELECT name, tag, version FROM plants WHERE id = ?')
  let head = Number(db.prepare('SELECT coalesce(max(position), 0) FROM changes').pluck().get())
  let turn: Array<{ plant: NewPlant, response: ServerResponse }> = []
  // A create's version (its change's position), the stored plant's for the same plant again, or undefined for another one.
  const commit = db.transaction((writes: typeof turn) => writes.map(({ plant }): number | undefined => {
    if (insert.run(plant.id, plant.name, plant.tag ?? null, head + 1).changes === 1) {
      log.run(++head, plant.id, plant.name, plant.tag ?? null, Date.now())
      return head
    }
    const row = stored.get(plant.id) as { name: string, tag: string | null, version: number }
    return row.name === plant.name && row.tag === (plant.tag ?? null) ? row.version : undefined
  }))
  const flush = (): void => {
    const writes = turn
    turn = []
    const before = head
    let versions: Array<number | undefined>
    try {
      versions = commit(writes)
    } catch {
      head = before // rolled back
      for (const { response } of writes) fail(response, 503, 'The store could not write; try again.')
      return
    }
    writes.forEach(({ plant, response }, i) => {
      const version = versions[i]
      if (version === undefined) fail(response, 409, 'Another plant uses this id.')
      else answerPlant(response, plant, { etag: `"${version}"` })
    })
  }
  return (request, response) => {
    if (request.method !== 'POST' || request.url !== '/plants') return fail(response, 404, 'There is no such route.')
    readPlant(request, response, plant => {
      if (turn.push({ plant, response }) === 1) setImmediate(flush)
    })
  }
}

function recordText (id: number, name: string, tag: string | null): string {
  return JSON.stringify(tag === null ? { id, name } : { id, name, tag })
}

function get (): Handler {
  const read = open().prepare('SELECT id, name, tag FROM plants WHERE id = ?').raw()
  return (request, response) => {
    const digits = request.method === 'GET' ? /^\/plants\/(-?\d{1,19})$/.exec(request.url ?? '')?.[1] : undefined
    const id = digits === undefined ? undefined : digits.length < 16 ? Number(digits) : BigInt(digits)
    const exact = typeof id === 'bigint' && (id < INT64[0] || id > INT64[1]) ? undefined : id
    const row = exact === undefined ? undefined : read.get(exact) as [number, string, string | null] | undefined
    if (row === undefined) return fail(response, 404, 'There is no such plant.')
    send(response, 200, recordText(row[0], row[1], row[2]))
  }
}

function list (): Handler {
  const page = open().prepare('SELECT id, name, tag FROM plants ORDER BY id LIMIT ?').raw()
  return (request, response) => {
    const digits = request.method === 'GET' ? /^\/plants\?limit=([1-9]\d{0,3})$/.exec(request.url ?? '')?.[1] : undefined
    const limit = Number(digits ?? 0)
    if (limit < 1 || limit > 1000) return fail(response, 400, 'The query must be limit=N, N from 1 to 1000.')
    const rows = page.all(limit + 1) as Array<[number, string, string | null]>
    const more = rows.length > limit
    if (more) rows.length = limit
    const text = JSON.stringify(rows.map(([id, name, tag]) => tag === null ? { id, name } : { id, name, tag }))
    send(response, 200, text, more ? { link: `</plants?limit=${limit}&after=${rows[limit - 1][0]}>; rel="next"` } : {})
  }
}

/** The store's statements, as src/store/postgres.ts sends them: ids as text, cast to int8. */
const PG_SQL = {
  insert: 'INSERT INTO plants (id, name, tag) SELECT * FROM unnest($1::int8[], $2::text[], $3::text[]) ON CONFLICT (id) DO NOTHING RETURNING id::text',
  byId: 'SELECT id, name, tag FROM plants WHERE id = $1::int8',
  first: 'SELECT id, name, tag FROM plants ORDER BY id LIMIT $1'
}

/** A record's JSON with the id's digits as PostgreSQL sent them. */
function recordJson (id: string, name: string, tag: string | null): string {
  return `{"id":${id},"name":${JSON.stringify(name)}${tag === null ? '' : `,"tag":${JSON.stringify(tag)}`}}`
}

type PgRow = [string, string, string | null]

/** The store's three statements through one client; rows as arrays, int8 as text. */
interface Statements {
  /** The ids it inserted. */
  insert (ids: string[], names: string[], tags: Array<string | null>): Promise<Set<string>>
  byId (id: string): Promise<PgRow[]>
  first (limit: number): Promise<PgRow[]>
}

function pgStatements (): Statements {
  const pool = new pg.Pool({ connectionString: database, max: 10, idleTimeoutMillis: 30_000, application_name: 'plantstore-yardstick' })
  pool.on('error', () => {})
  return {
    insert: async (ids, names, tags) => new Set((await pool.query<[string]>({ text: PG_SQL.insert, values: [ids, names, tags], rowMode: 'array' })).rows.map(([id]) => id)),
    byId: async (id) => (await pool.query<PgRow>({ text: PG_SQL.byId, values: [id], rowMode: 'array' })).rows,
    first: async (limit) => (await pool.query<PgRow>({ text: PG_SQL.first, values: [limit], rowMode: 'array' })).rows
  }
}

function postgresJsStatements (): Statements {
  const sql = postgresJs(database, { max: 10, idle_timeout: 30, connection: { application_name: 'plantstore-yardstick' }, onnotice: () => {} })
  return {
    insert: async (ids, names, tags) => new Set((await sql`INSERT INTO plants (id, name, tag) SELECT * FROM unnest(${ids}::int8[], ${names}::text[], ${tags}::text[]) ON CONFLICT (id) DO NOTHING RETURNING id::text`.values()).map(([id]) => id as string)),
    byId: async (id) => await sql`SELECT id, name, tag FROM plants WHERE id = ${id}::int8`.values() as unknown as PgRow[],
    first: async (limit) => await sql`SELECT id, name, tag FROM plants ORDER BY id LIMIT ${limit}`.values() as unknown as PgRow[]
  }
}

function postgres (db: Statements): Handler {
  let turn: Array<{ plant: NewPlant, inserted: (ids: Set<string>) => void, failed: (error: unknown) => void }> = []
  const insertTurn = (): void => {
    const batch = turn
    turn = []
    db.insert(batch.map(entry => String(entry.plant.id)), batch.map(entry => entry.plant.name), batch.map(entry => entry.plant.tag ?? null))
      .then(ids => { for (const entry of batch) entry.inserted(ids) }, error => { for (const entry of batch) entry.failed(error) })
  }
  const create = async (plant: NewPlant): Promise<boolean> => {
    const tag = plant.tag ?? null
    const ids = await new Promise<Set<string>>((resolve, reject) => {
      if (turn.length === 0) setImmediate(insertTurn)
      turn.push({ plant, inserted: resolve, failed: reject })
    })
    if (ids.has(String(plant.id))) return true
    const [row] = await db.byId(String(plant.id))
    return row !== undefined && row[1] === plant.name && row[2] === tag
  }
  const unavailable = (response: ServerResponse) => () => fail(response, 503, 'The database did not answer; try again.')
  return (request, response) => {
    const url = request.url ?? ''
    if (request.method === 'POST' && url === '/plants') {
      return readPlant(request, response, plant => {
        create(plant).then(same => same ? answerPlant(response, plant) : fail(response, 409, 'Another plant uses this id.'), unavailable(response))
      })
    }
    const digits = request.method === 'GET' ? /^\/plants\/(-?\d{1,19})$/.exec(url)?.[1] : undefined
    if (digits !== undefined) {
      if (digits.length === 19 && (BigInt(digits) < INT64[0] || BigInt(digits) > INT64[1])) return fail(response, 404, 'There is no such plant.')
      db.byId(digits).then(([row]) => row === undefined ? fail(response, 404, 'There is no such plant.') : send(response, 200, recordJson(...row)), unavailable(response))
      return
    }
    const limit = Number(request.method === 'GET' ? /^\/plants\?limit=([1-9]\d{0,3})$/.exec(url)?.[1] ?? 0 : 0)
    if (limit < 1 || limit > 1000) return fail(response, 404, 'There is no such route.')
    db.first(limit + 1).then(rows => {
      const more = rows.length > limit
      if (more) rows.length = limit
      const text = `[${rows.map(row => recordJson(...row)).join(',')}]`
      send(response, 200, text, more ? { link: `</plants?limit=${limit}&after=${rows[limit - 1][0]}>; rel="next"` } : {})
    }, unavailable(response))
  }
}

const handlers = { ceiling, durable, get, list, postgres: () => postgres(pgStatements()), 'postgres-js': () => postgres(postgresJsStatements()) }
if (!(mode in handlers) || token === '' || (mode !== 'ceiling' && database === '')) {
  process.stderr.write('yardsticks: set YARDSTICK (ceiling, durable, get, list, postgres or postgres-js), YARDSTICK_TOKEN and, but for ceiling, DATABASE_PATH (postgres, postgres-js: DATABASE_URL)\n')
  process.exit(1)
}
const handle = handlers[mode as keyof typeof handlers]()

const server = createServer((request, response) => {
  if (request.url === '/healthz') return send(response, 200, '{"status":"ok"}')
  if (request.headers.authorization !== expected) return fail(response, 401, 'A valid bearer token is required.')
  handle(request, response)
})
server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1')
process.once('SIGTERM', () => server.close(() => process.exit(0)))
