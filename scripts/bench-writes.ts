// CPU per write of the SQLite store alone, without HTTP: the store's share of a POST, against its
// floor. The floor runs the store's create statements on the store's own schema with
// better-sqlite3 directly: the writes of one turn in one transaction, the WAL's fdatasync on
// libuv's thread pool, SQLite's own checkpoints on the event loop, each caller's promise settled
// once the sync returns. That is the least an asynchronous durable create can do; what the store
// costs beyond it is its design (the pipeline, deadlines and caps, the checkpointer thread, the
// results). Rounds alternate the two, the order turning each round, as the HTTP bench does.
// Usage: npm run bench:writes [-- WRITES BATCH ROUNDS], defaults 20000 writes in batches of 30
// (about what group commit gathers under the HTTP bench's 64 connections, docs/performance.md),
// 5 rounds. CPU counts every thread of this process; pin it (`taskset -c 0`) as the bench pins
// the servers.
import { closeSync, fdatasync, mkdtempSync, openSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openDatabase } from '../src/store/sqlite-driver.js'
import { SqliteStore } from '../src/store/sqlite.js'

/** Writes before each measure: past the first checkpoints, at about 5 pages a commit of 30. */
const WARM_UP = 20_000
const [writes, batch, rounds] = [Number(process.argv[2] ?? 20_000), Number(process.argv[3] ?? 30), Number(process.argv[4] ?? 5)]

interface Subject { create: (id: bigint) => Promise<unknown>, close: () => Promise<unknown>, commits: () => number }

function theStore (path: string): Subject {
  const store = new SqliteStore(path)
  return { create: id => store.create({ id, name: `Plant ${id}`, tag: 'bench' }), close: () => store.close(), commits: () => store.stats.transactions }
}

async function theFloor (path: string): Promise<Subject> {
  await new SqliteStore(path).close() // the store's schema, migrated
  const db = openDatabase(path)
  db.pragma('journal_mode = WAL')
  db.pragma('synchronous = NORMAL')
  db.defaultSafeIntegers(true)
  const sql = {
    head: db.prepare('SELECT head FROM change_log').pluck(),
    advance: db.prepare('UPDATE change_log SET head = ?'),
    insert: db.prepare('INSERT INTO plants (id, name, tag, version) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING'),
    log: db.prepare('INSERT INTO changes (position, type, plant_id, name, tag, tag_before, at) VALUES (?, ?, ?, ?, ?, ?, ?)')
  }
  const wal = openSync(`${path}-wal`, 'r+')
  interface Write { id: bigint, name: string, tag: string, settle: (created: boolean) => void }
  const commit = db.transaction((turn: Write[]) => {
    let head = sql.head.get() as bigint
    const created = turn.map(({ id, name, tag }) => {
      if (sql.insert.run(id, name, tag, head + 1n).changes === 0) return false
      sql.log.run(++head, 'plant.created', id, name, tag, null, Date.now())
      return true
    })
    sql.advance.run(head)
    return created
  })
  let turn: Write[] = []
  let commits = 0
  const flush = (): void => {
    const writes = turn
    turn = []
    const created = commit(writes)
    commits++
    fdatasync(wal, () => writes.forEach((write, i) => write.settle(created[i])))
  }
  return {
    create: id => new Promise(resolve => {
      if (turn.push({ id, name: `Plant ${id}`, tag: 'bench', settle: resolve }) === 1) setImmediate(flush)
    }),
    close: async () => { closeSync(wal); db.close() },
    commits: () => commits
  }
}

/** CPU µs per write of `subject` over `writes` creates, `batch` asked for in one turn (one commit), after a warm-up. */
async function measure (subject: Subject): Promise<{ cpu: number, rate: number, perCommit: number }> {
  let nextId = 1n
  const create = async (count: number): Promise<void> => {
    for (let done = 0; done < count; done += batch) await Promise.all(Array.from({ length: batch }, () => subject.create(nextId++)))
  }
  // JIT, the WAL's first pages, the first checkpoints (the store's thread starts at its first one;
  // under tsx it loads tsx too, a start that a running service has long behind it).
  await create(WARM_UP)
  const commits = subject.commits()
  const cpu = process.cpuUsage()
  const start = performance.now()
  await create(writes)
  const { user, system } = process.cpuUsage(cpu)
  return { cpu: (user + system) / writes, rate: writes / ((performance.now() - start) / 1000), perCommit: writes / (subject.commits() - commits) }
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
const dir = mkdtempSync(join(tmpdir(), 'plantstore-bench-writes-'))
const figures: Record<'store' | 'floor', number[]> = { store: [], floor: [] }
try {
  for (let round = 0; round < rounds; round++) {
    const order = round % 2 === 0 ? ['store', 'floor'] as const : ['floor', 'store'] as const
    const line: string[] = []
    for (const name of order) {
      const path = join(dir, `${name}-${round}.db`)
      const subject = name === 'store' ? theStore(path) : await theFloor(path)
      const { cpu, rate, perCommit } = await measure(subject)
      await subject.close()
      figures[name].push(cpu)
      line.push(`${name} ${cpu.toFixed(2)} µs (${Math.round(rate)}/s, ${perCommit.toFixed(1)} a commit)`)
    }
    console.log(`round ${round + 1}: ${line.join(', ')}, store ÷ floor ${(figures.store[round] / figures.floor[round]).toFixed(2)}`)
  }
  const ratios = figures.store.map((cpu, i) => cpu / figures.floor[i])
  console.log(`${writes} writes in batches of ${batch}, CPU of every thread per write, medians of ${rounds} rounds: ` +
    `store ${median(figures.store).toFixed(2)} µs, floor ${median(figures.floor).toFixed(2)} µs, store ÷ floor ${median(ratios).toFixed(2)}`)
} finally {
  rmSync(dir, { recursive: true, force: true })
}
