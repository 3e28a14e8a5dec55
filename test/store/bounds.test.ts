import assert from 'node:assert/strict'
import Database from 'better-sqlite3'
import { spawn, spawnSync } from 'node:child_process'
import { renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { StoreUnavailableError } from '../../src/errors.js'
import { SqliteStore, type StoreLimits } from '../../src/store/sqlite.js'
import { tempDir } from '../helpers.js'

/** A store on a fresh file, with `limits`, and a second connection to the file: another process's lock. */
async function lockedStore (t: TestContext, limits: Partial<StoreLimits>): Promise<{ store: SqliteStore, path: string, lock: () => void, release: () => void }> {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path, limits)
  await store.ping() // the writer thread is up: what follows measures waits for the lock, not its start
  const other = new Database(path)
  t.after(async () => { if (other.inTransaction) other.exec('ROLLBACK'); other.close(); await store.close() })
  return { store, path, lock: () => other.exec('BEGIN IMMEDIATE'), release: () => other.exec('ROLLBACK') }
}

/** Resolves with how many ms `promise` took to settle, and how it settled. */
async function timed (promise: Promise<unknown>): Promise<{ ms: number, error?: unknown }> {
  const start = Date.now()
  try {
    await promise
    return { ms: Date.now() - start }
  } catch (error) {
    return { ms: Date.now() - start, error }
  }
}

test('a write waits for a lock held elsewhere until its own deadline at most; past it, it is refused and never stored', async (t) => {
  const { store, lock, release } = await lockedStore(t, { writeTimeoutMs: 600 })
  lock()
  const first = timed(store.create({ id: 1n, name: 'first' })) // deadline at 600 ms
  await sleep(300)
  const second = timed(store.create({ id: 2n, name: 'second' })) // deadline at 900 ms
  assert.deepEqual(await store.get(0n), undefined, 'reads answer while the lock is held')
  const refused = await first
  assert.ok(refused.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(refused.error)}`)
  assert.ok(refused.ms >= 500 && refused.ms < 1200, `refused at its deadline: ${refused.ms} ms`)
  await sleep(150) // 750 ms: past the first write's deadline, within the second's
  release()
  const accepted = await second
  assert.equal(accepted.error, undefined, 'the later write waited for the lock until its own deadline, and got it')
  assert.equal(await store.get(1n), undefined, 'the refused write was not stored, though the lock came free right after')
  assert.deepEqual(await store.get(2n), { id: 2n, name: 'second' })
})

test('past the cap on writes in flight, a write is refused at once; those in flight still complete', async (t) => {
  const { store, lock, release } = await lockedStore(t, { writesInFlight: 4, writeTimeoutMs: 5000 })
  lock()
  const inFlight = [1n, 2n, 3n, 4n].map(id => store.create({ id, name: `n${id}` }))
  await sleep(50) // they have reached the writer, which waits for the lock
  const over = await timed(store.create({ id: 5n, name: 'one too many' }))
  assert.ok(over.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(over.error)}`)
  assert.ok(over.ms < 100, `at once: ${over.ms} ms`)
  release()
  assert.deepEqual(await Promise.all(inFlight), ['created', 'created', 'created', 'created'])
  assert.equal(await store.create({ id: 5n, name: 'room again' }), 'created')
})

test('past the cap on reads waiting, a read is refused at once; the others are answered', async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'), { readsPending: 4 })
  t.after(() => store.close())
  const reads = await Promise.allSettled([1n, 2n, 3n, 4n, 5n].map(id => store.get(id)))
  assert.deepEqual(reads.map(read => read.status), ['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected'])
  assert.ok((reads[4] as PromiseRejectedResult).reason instanceof StoreUnavailableError)
})

test('a writer that never answers (a hung fsync) is backstopped: its writes are answered 503 after the deadline, and the queue stays capped', async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'), { writesInFlight: 3, writeTimeoutMs: 300 })
  await store.ping()
  const internals = store as unknown as { worker?: { postMessage: (message: unknown) => void } }
  const real = internals.worker
  internals.worker = { postMessage () {} } // swallows every write, as a writer stuck in fsync would
  t.after(async () => { internals.worker = real; await store.close() })
  const stuck = [1n, 2n, 3n].map(id => timed(store.create({ id, name: 'stuck' })))
  await sleep(20)
  const over = await timed(store.create({ id: 4n, name: 'over' }))
  assert.ok(over.error instanceof StoreUnavailableError && over.ms < 100, 'the cap holds the queue')
  for (const { ms, error } of await Promise.all(stuck)) {
    assert.ok(error instanceof StoreUnavailableError, `answered 503, got ${String(error)}`)
    assert.ok(ms >= 300 && ms < 1200, `after the deadline, within a sweep or two: ${ms} ms`)
  }
  const still = await timed(store.create({ id: 5n, name: 'still stuck' }))
  assert.ok(still.error instanceof StoreUnavailableError && still.ms < 100, 'answered writes still sit in the hung writer: the cap still counts them')
})

test('a writer that cannot open the file is retried with a back-off, says why, and the store recovers once the file is back', async (t) => {
  const dir = tempDir(t)
  const store = new SqliteStore(join(dir, 'data', 'plantstore.db'))
  t.after(() => store.close())
  renameSync(join(dir, 'data'), join(dir, 'moved')) // the database is lost before the first write
  const first = await timed(store.create({ id: 1n, name: 'lost' }))
  assert.ok(first.error instanceof StoreUnavailableError)
  assert.match((first.error as Error).message, /^The SQLite writer stopped: .*directory does not exist/)

  const started = store.stats.writerStarts
  const until = Date.now() + 1000
  const waits: number[] = []
  while (Date.now() < until) {
    const attempt = await timed(store.create({ id: 1n, name: 'lost' }))
    assert.ok(attempt.error instanceof StoreUnavailableError)
    assert.doesNotMatch((attempt.error as Error).message, /undefined/)
    waits.push(attempt.ms)
    await sleep(10)
  }
  const starts = store.stats.writerStarts - started
  assert.ok(starts >= 2 && starts <= 5, `back-off of 100 ms doubling: 100+200+400 ms fit in 1 s; ${starts} starts for ${waits.length} writes`)
  assert.ok(waits.filter(ms => ms < 5).length >= waits.length - starts, 'between starts, writes are refused at once')

  renameSync(join(dir, 'moved'), join(dir, 'data'))
  const back = Date.now() + 8000
  let outcome: unknown
  while (outcome === undefined && Date.now() < back) {
    outcome = await store.create({ id: 1n, name: 'found' }).catch(() => undefined)
    if (outcome === undefined) await sleep(50)
  }
  assert.equal(outcome, 'created', 'the store recovered on its own')
})

test('a writer start that SQLite refuses names SQLite\'s error, never "undefined"', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  rmSync(path)
  writeFileSync(path, 'this is not a database, though it is long enough for a header.'.repeat(2))
  await assert.rejects(store.create({ id: 1n, name: 'x' }), (error: Error) => {
    assert.ok(error instanceof StoreUnavailableError)
    assert.equal(error.message, 'The SQLite writer stopped: SQLITE_NOTADB: file is not a database')
    return true
  })
})

const python = spawnSync('python3', ['--version']).status === 0
test('a read never sleeps in busy_timeout: when another process holds the lock it needs, it is refused at once', { skip: python ? false : 'needs python3 (fcntl byte locks)' }, async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  await store.create({ id: 1n, name: 'Fern' })
  // What another process does while it rebuilds the WAL index after a crash: it holds the
  // index's write and recovery locks, and the index's header does not check out meanwhile.
  const recovering = spawn('python3', ['-c', `
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 120, 0)
fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 122, 0)
changed = os.pread(fd, 1, 56)[0] ^ 0xff
os.pwrite(fd, bytes([changed]), 56)
print('recovering', flush=True)
time.sleep(2)
`, `${path}-shm`], { stdio: ['ignore', 'pipe', 'inherit'] })
  const done = new Promise(resolve => recovering.once('exit', resolve))
  t.after(() => { recovering.kill(); return done })
  await new Promise(resolve => recovering.stdout.once('data', resolve))
  const read = await timed(store.get(1n))
  assert.ok(read.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(read.error)}`)
  assert.ok(read.ms < 200, `at once, the event loop never slept: ${read.ms} ms`)
  await done
  assert.deepEqual(await store.get(1n), { id: 1n, name: 'Fern' }, 'once the other process is done, reads answer again')
})
