import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { spawn, spawnSync } from 'node:child_process'
import { fdatasync, writeFileSync } from 'node:fs'
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
  await store.ping()
  const other = openDatabase(path)
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

/** Watches the event loop: resolves, when stopped, with the longest gap between two ticks of a 1 ms timer. */
function watchLoop (): () => number {
  let last = Date.now()
  let longest = 0
  const timer = setInterval(() => {
    longest = Math.max(longest, Date.now() - last)
    last = Date.now()
  }, 1)
  return () => { clearInterval(timer); return longest }
}

test('a write waits for a lock held elsewhere until its own deadline at most, without stalling the event loop; past it, it is refused and never stored', async (t) => {
  const { store, lock, release } = await lockedStore(t, { writeTimeoutMs: 600 })
  lock()
  const stopWatching = watchLoop()
  const first = timed(store.create({ id: 1n, name: 'first' })) // deadline at 600 ms
  await sleep(300)
  const second = timed(store.create({ id: 2n, name: 'second' })) // deadline at 900 ms
  assert.deepEqual(await store.get(0n), undefined, 'reads answer while the lock is held')
  const refused = await first
  assert.ok(refused.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(refused.error)}`)
  assert.equal(refused.error.reason, 'deadline')
  assert.ok(refused.ms >= 500 && refused.ms < 1200, `refused at its deadline: ${refused.ms} ms`)
  await sleep(150) // 750 ms: past the first write's deadline, within the second's
  release()
  const accepted = await second
  const stall = stopWatching()
  assert.equal(accepted.error, undefined, 'the later write waited for the lock until its own deadline, and got it')
  assert.ok(stall < 100, `the event loop never slept on the lock: longest gap ${stall} ms`)
  assert.equal(await store.get(1n), undefined, 'the refused write was not stored, though the lock came free right after')
  assert.deepEqual((await store.get(2n))?.plant, { id: 2n, name: 'second' })
})

test('past the cap on writes in flight, a write is refused at once; those in flight still complete', async (t) => {
  const { store, lock, release } = await lockedStore(t, { writesInFlight: 4, writeTimeoutMs: 5000 })
  lock()
  const inFlight = [1n, 2n, 3n, 4n].map(id => store.create({ id, name: `n${id}` }))
  await sleep(50) // their turn has ended: they wait for the lock
  const over = await timed(store.create({ id: 5n, name: 'one too many' }))
  assert.ok(over.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(over.error)}`)
  assert.equal(over.error.reason, 'capacity')
  assert.ok(over.ms < 100, `at once: ${over.ms} ms`)
  release()
  assert.deepEqual((await Promise.all(inFlight)).map(created => created.outcome), ['created', 'created', 'created', 'created'])
  assert.equal((await store.create({ id: 5n, name: 'room again' })).outcome, 'created')
})

test('past the cap on reads waiting, a read is refused at once; the others are answered', async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'), { readsPending: 4 })
  t.after(() => store.close())
  const reads = await Promise.allSettled([1n, 2n, 3n, 4n, 5n].map(id => store.get(id)))
  assert.deepEqual(reads.map(read => read.status), ['fulfilled', 'fulfilled', 'fulfilled', 'fulfilled', 'rejected'])
  assert.ok((reads[4] as PromiseRejectedResult).reason instanceof StoreUnavailableError)
  assert.equal((reads[4] as PromiseRejectedResult).reason.reason, 'capacity')
})

/** The store's fdatasync of the WAL, replaced: each call waits until the test settles it. */
function holdSyncs (t: TestContext, store: SqliteStore): Array<(error: NodeJS.ErrnoException | null) => void> {
  const alive = setInterval(() => {}, 1000) // a real fdatasync keeps the process alive; this one does not
  t.after(() => clearInterval(alive))
  const held: Array<(error: NodeJS.ErrnoException | null) => void> = []
  store.wal.syncWal = (_fd: number, done: (error: NodeJS.ErrnoException | null) => void) => { held.push(done) }
  return held
}

test('an fdatasync that never returns (a stalled disk) is backstopped: its writes are answered 503 after the deadline, and the cap still counts them', { timeout: 10_000 }, async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'), { writesInFlight: 3, writeTimeoutMs: 300 })
  await store.ping()
  const held = holdSyncs(t, store)
  t.after(async () => { for (const done of held) done(null); await store.close() })
  const stuck = [1n, 2n, 3n].map(id => timed(store.create({ id, name: 'stuck' })))
  await sleep(20)
  assert.equal(held.length, 1, 'one commit, one fdatasync, which hangs')
  const over = await timed(store.create({ id: 4n, name: 'over' }))
  assert.ok(over.error instanceof StoreUnavailableError && over.ms < 100, 'the cap holds the queue')
  assert.equal(over.error.reason, 'capacity')
  for (const { ms, error } of await Promise.all(stuck)) {
    assert.ok(error instanceof StoreUnavailableError, `answered 503, got ${String(error)}`)
    assert.equal(error.reason, 'deadline')
    assert.ok(ms >= 300 && ms < 1200, `after the deadline, within a sweep or two: ${ms} ms`)
  }
  const still = await timed(store.create({ id: 5n, name: 'still stuck' }))
  assert.ok(still.error instanceof StoreUnavailableError && still.ms < 100, 'answered writes still wait for their fdatasync: the cap still counts them')
  store.wal.syncWal = fdatasync // the disk comes back
  held[0](null)
  assert.equal((await store.create({ id: 6n, name: 'after' })).outcome, 'created', 'the next write is durable and answered')
  assert.equal((await store.create({ id: 1n, name: 'stuck' })).outcome, 'same', 'a write answered 503 by the backstop was committed all the same: its retry is safe')
})

test('after an fdatasync of the WAL fails (EIO), nothing of its batch is answered 200, and no write after it either; reads go on', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  await store.create({ id: 1n, name: 'durable' })
  const held = holdSyncs(t, store)
  t.after(() => store.close())
  const batch = [2n, 3n].map(id => store.create({ id, name: 'in the failed batch' }))
  await sleep(20)
  const eio = Object.assign(new Error('i/o error'), { code: 'EIO' })
  held[0](eio)
  for (const result of await Promise.allSettled(batch)) {
    assert.equal(result.status, 'rejected')
    assert.ok((result as PromiseRejectedResult).reason instanceof StoreUnavailableError)
    assert.match((result as PromiseRejectedResult).reason.message, /fdatasync of the WAL failed \(EIO/)
  }
  // Even if later syncs succeed, the pages the kernel failed to write may be gone: refused, at once.
  store.wal.syncWal = (_fd: number, done: (error: null) => void) => { done(null) }
  const later = await timed(store.create({ id: 4n, name: 'later' }))
  assert.ok(later.error instanceof StoreUnavailableError && later.ms < 100, `refused at once, got ${String(later.error)} after ${later.ms} ms`)
  const read = await timed(store.get(1n))
  assert.deepEqual(read, { ms: read.ms }, 'reads still answer')
  assert.ok(read.ms < 100)
  assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'durable' })
})

test('a file that is not a database is refused when the store opens, with SQLite\'s words, never "undefined"', (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  writeFileSync(path, 'this is not a database, though it is long enough for a header.'.repeat(2))
  assert.throws(() => new SqliteStore(path), (error: Error) => {
    assert.match(error.message, /file is not a database/)
    assert.doesNotMatch(error.message, /undefined/)
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
  assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'Fern' }, 'once the other process is done, reads answer again')
})

test('a close given less time than a waiting write\'s deadline refuses it then, unstored, and leaves the file to the next open', async (t) => {
  const { store, path, lock, release } = await lockedStore(t, { writeTimeoutMs: 5000 })
  lock()
  const waiting = timed(store.create({ id: 1n, name: 'waiting' })) // its own deadline is 5 s away
  await sleep(50)
  const closed = timed(store.close(300))
  const refused = await waiting
  assert.ok(refused.error instanceof StoreUnavailableError, `refused as unavailable, got ${String(refused.error)}`)
  assert.ok(refused.ms < 1500, `refused within the close's 300 ms, not at its own deadline: ${refused.ms} ms`)
  const { ms } = await closed
  assert.ok(ms < 1500, `the close took ${ms} ms`)
  release()
  const again = new SqliteStore(path)
  t.after(() => again.close())
  assert.equal(await again.get(1n), undefined, 'never stored')
})
