import assert from 'node:assert/strict'
import type Database from 'better-sqlite3'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { fstatSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { StoreUnavailableError } from '../../src/errors.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { tempDir } from '../helpers.js'

/** Frames in the store's WAL since its last restart, and those copied into the database file, as SQLite's WAL index tells. */
function walOf (store: SqliteStore): { log: number, checkpointed: number } {
  const { writer } = store as unknown as { writer: { db: Database.Database } }
  const [row] = writer.db.pragma('wal_checkpoint(NOOP)') as Array<{ log: bigint, checkpointed: bigint }>
  return { log: Number(row.log), checkpointed: Number(row.checkpointed) }
}

function openStore (t: Parameters<typeof tempDir>[0]): SqliteStore {
  const store = new SqliteStore(join(tempDir(t), 'nested', 'plantstore.db'))
  t.after(() => store.close())
  return store
}

test('writes made in one turn of the event loop share one commit', async (t) => {
  const store = openStore(t)
  await store.ping()
  const before = { ...store.stats }
  const outcomes = await Promise.all(Array.from({ length: 200 }, (_, i) => store.create({ id: BigInt(i), name: `p${i}` })))
  assert.ok(outcomes.every(({ outcome }) => outcome === 'created'))
  assert.equal(store.stats.writes - before.writes, 200)
  assert.equal(store.stats.transactions - before.transactions, 1)
  assert.equal(store.stats.syncs - before.syncs, 1, 'and one fdatasync')
})

test('each commit is reported to onCommit with the number of writes it carried', async (t) => {
  const store = openStore(t)
  await store.ping()
  const commits: number[] = []
  store.onCommit = writes => commits.push(writes)
  await Promise.all(Array.from({ length: 30 }, (_, i) => store.create({ id: BigInt(i), name: `p${i}` })))
  await store.remove(0n)
  assert.deepEqual(commits, [30, 1])
})

/** Replaces the store's fdatasync of the WAL with one that waits until the test lets it return. */
function holdSyncs (store: SqliteStore): Array<() => void> {
  const held: Array<() => void> = []
  store.wal.syncWal = (_fd: number, done: (error: null) => void) => { held.push(() => done(null)) }
  return held
}

/** A fresh, working store whose fdatasyncs are held from now on; they are let go after the test. */
async function storeWithHeldSyncs (t: TestContext): Promise<{ store: SqliteStore, held: Array<() => void> }> {
  const store = openStore(t)
  await store.ping()
  const held = holdSyncs(store)
  t.after(() => { for (const release of held) release() })
  return { store, held }
}

/** Whether `promise` has settled by the end of the current turn. */
async function settled (promise: Promise<unknown>): Promise<boolean> {
  let done = false
  promise.then(() => { done = true }, () => { done = true })
  await new Promise(resolve => setImmediate(resolve))
  await new Promise(resolve => setImmediate(resolve))
  return done
}

test('a write is answered only after an fdatasync that began after its commit; the next turn commits meanwhile and waits for the next one', async (t) => {
  const { store, held } = await storeWithHeldSyncs(t)
  const first = store.create({ id: 1n, name: 'first' })
  await new Promise(resolve => setImmediate(resolve))
  assert.equal(held.length, 1, 'the first commit\'s fdatasync runs')
  const second = store.create({ id: 2n, name: 'second' })
  await new Promise(resolve => setImmediate(resolve))
  assert.equal(store.stats.transactions, 3, 'the second turn committed while the first fdatasync ran')
  assert.equal(held.length, 1, 'but its fdatasync waits: the running one may have begun before its commit')
  assert.equal(await settled(first), false, 'committed is not answered: the first write waits for its fdatasync')
  held[0]()
  assert.equal((await first).outcome, 'created')
  assert.equal(held.length, 2, 'the next fdatasync began once the first returned')
  assert.equal(await settled(second), false)
  held[1]()
  assert.equal((await second).outcome, 'created')
})

test('a read that may see a commit not yet durable is answered after that commit\'s fdatasync', async (t) => {
  const { store, held } = await storeWithHeldSyncs(t)
  const write = store.create({ id: 1n, name: 'Fern' })
  await new Promise(resolve => setImmediate(resolve)) // committed, its fdatasync running
  const read = store.get(1n)
  assert.equal(await settled(read), false, 'the read saw the commit and waits for its fdatasync')
  held[0]()
  assert.deepEqual((await read)?.plant, { id: 1n, name: 'Fern' })
  assert.equal((await write).outcome, 'created')
  const quick = store.get(1n)
  assert.equal(await settled(quick), true, 'with nothing waiting for an fdatasync, a read answers in its own turn')
})

test('reads asked for in one turn run as one batch, each answered with its own record', async (t) => {
  const store = openStore(t)
  for (const id of [1n, 2n, 3n]) await store.create({ id, name: `n${id}`, ...(id === 2n ? {} : { tag: 't' }) })
  const before = { ...store.stats }
  const ids = Array.from({ length: 60 }, (_, i) => BigInt(i % 5)) // 0 and 4 do not exist
  const [page, ...plants] = await Promise.all([store.list({ limit: 10, tag: 't' }), ...ids.map(id => store.get(id))])
  assert.deepEqual(page.plants, [{ id: 1n, name: 'n1', tag: 't' }, { id: 3n, name: 'n3', tag: 't' }])
  assert.deepEqual(plants.map(found => found?.plant), ids.map(id => id === 0n || id === 4n ? undefined : { id, name: `n${id}`, ...(id === 2n ? {} : { tag: 't' }) }))
  assert.equal(store.stats.reads - before.reads, 61)
  assert.equal(store.stats.readBatches - before.readBatches, 1)
  assert.deepEqual((await store.get(3n))?.plant, { id: 3n, name: 'n3', tag: 't' }, 'a later turn reads again')
  assert.equal(store.stats.readBatches - before.readBatches, 2)
})

test('the reads of one batch share one snapshot: a commit made meanwhile shows in the next batch', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  const other = openDatabase(path) // another process's connection, committing in the middle of a batch
  t.after(async () => { other.close(); await store.close() })
  await store.create({ id: 1n, name: 'Fern' })
  const read = (store as unknown as { read: <T>(query: () => T) => Promise<T> }).read.bind(store)
  const [first, committed, second] = await Promise.all([
    store.get(1n), // the batch's first statement takes the snapshot
    read(() => other.prepare("INSERT INTO plants (id, name) VALUES (2, 'Moss')").run().changes),
    store.get(2n)
  ])
  assert.deepEqual(first?.plant, { id: 1n, name: 'Fern' })
  assert.equal(committed, 1)
  assert.equal(second, undefined, 'the batch\'s snapshot predates the commit')
  assert.deepEqual((await store.get(2n))?.plant, { id: 2n, name: 'Moss' })
})

test('reads still waiting when the store closes are answered; reads after it are refused', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const writer = new SqliteStore(path)
  await writer.create({ id: 1n, name: 'Fern' })
  await writer.close()
  const store = new SqliteStore(path)
  const waiting = store.get(1n)
  await store.close()
  assert.deepEqual((await waiting)?.plant, { id: 1n, name: 'Fern' })
  await assert.rejects(store.get(1n), StoreUnavailableError)
})

test('one failing write does not undo the others in its commit', async (t) => {
  const store = openStore(t)
  const results = await Promise.allSettled([
    store.create({ id: 1n, name: 'ok' }),
    store.create({ id: 2n, name: null as unknown as string }), // NOT NULL violation: a bug, not a conflict
    store.create({ id: 3n, name: 'ok too' })
  ])
  assert.deepEqual(results.map(r => r.status), ['fulfilled', 'rejected', 'fulfilled'])
  assert.equal((await store.list({ limit: 10 })).plants.length, 2)
})

test('a write that makes SQLite roll back the whole transaction fails its whole batch, and nothing of the batch is stored', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  const other = openDatabase(path) // plants a trigger that rolls back the writer's transaction, as a full disk would
  t.after(async () => { other.close(); await store.close() })
  other.exec("CREATE TRIGGER boom BEFORE INSERT ON plants WHEN NEW.name = 'boom' BEGIN SELECT RAISE(ROLLBACK, 'boom'); END")
  const results = await Promise.allSettled([
    store.create({ id: 1n, name: 'first' }),
    store.create({ id: 2n, name: 'boom' }),
    store.create({ id: 3n, name: 'after' })
  ])
  assert.deepEqual(results.map(r => r.status), ['rejected', 'rejected', 'rejected'], 'none is reported stored')
  assert.deepEqual((await store.list({ limit: 10 })).plants, [], 'and none is: the write after it did not run on its own')
  assert.equal((await store.create({ id: 4n, name: 'next' })).outcome, 'created', 'the next batch commits as usual')
})

test('a write that fails in its savepoint takes no position: the turn\'s other writes log contiguous positions', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  const other = openDatabase(path) // a trigger that fails the one write whose change names 'boom', as a constraint would
  t.after(async () => { other.close(); await store.close() })
  other.exec("CREATE TRIGGER boom BEFORE INSERT ON changes WHEN NEW.name = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END")
  const results = await Promise.allSettled([
    store.create({ id: 1n, name: 'first' }),
    store.create({ id: 2n, name: 'boom' }),
    store.replace(1n, { name: 'after' })
  ])
  assert.deepEqual(results.map(r => r.status), ['fulfilled', 'rejected', 'fulfilled'])
  assert.equal(await store.get(2n), undefined, 'neither its plant nor its change')
  const page = await store.changes({ limit: 10 })
  assert.notEqual(page, 'gone')
  assert.deepEqual(page !== 'gone' && page.changes.map(change => [change.position, change.plant.id]), [[1n, 1n], [2n, 1n]])
  assert.deepEqual(await store.logBounds(), { head: 2n, floor: 0n })
  assert.equal((await store.get(1n))?.version, 2n)
})

test('a turn of 101 writes logs each change once, in order, with its tag', async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'))
  t.after(() => store.close())
  const before = Date.now()
  const writes = await Promise.all([
    ...Array.from({ length: 100 }, (_, i) => store.create({ id: BigInt(100 - i), name: `p${100 - i}`, ...(i % 2 === 0 ? { tag: 'even' } : {}) })),
    store.replace(100n, { name: 'renamed' })
  ])
  assert.deepEqual(writes.map(w => typeof w === 'object' && 'version' in w ? w.version : undefined), Array.from({ length: 101 }, (_, i) => BigInt(i + 1)))
  const page = await store.changes({ limit: 1000 })
  assert.notEqual(page, 'gone')
  if (page === 'gone') return
  assert.deepEqual(page.changes.map(change => [change.position, change.type, change.plant]), [
    ...Array.from({ length: 100 }, (_, i) => [BigInt(i + 1), 'plant.created', { id: BigInt(100 - i), name: `p${100 - i}`, ...(i % 2 === 0 ? { tag: 'even' } : {}) }]),
    [101n, 'plant.updated', { id: 100n, name: 'renamed' }]
  ])
  assert.ok(page.changes.every(change => change.at.getTime() >= before - 1 && change.at.getTime() <= Date.now()))
  assert.deepEqual(await store.logBounds(), { head: 101n, floor: 0n })
  const tagged = await store.changes({ limit: 1000, tag: 'even' })
  assert.equal(tagged !== 'gone' && tagged.changes.length, 51, 'the tag, and the tag before the replace, kept per change')
})

test('past its bound the WAL is checkpointed by another thread and restarted; the WAL file keeps its size and its inode', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  const internals = store as unknown as { walFd: number, writer: { db: { pragma: (text: string, options: { simple: true }) => unknown } } }
  assert.equal(internals.writer.db.pragma('wal_autocheckpoint', { simple: true }), 0n, 'the write connection, on the event loop, never checkpoints')
  const inode = fstatSync(internals.walFd).ino
  const name = 'x'.repeat(2000)
  let most = 0
  let restarted = false
  for (let round = 0; round < 100 && !restarted; round++) {
    await Promise.all(Array.from({ length: 500 }, (_, i) => store.create({ id: BigInt(round * 500 + i), name })))
    await new Promise(resolve => setTimeout(resolve, 50))
    const frames = walOf(store).log
    restarted = frames < most
    most = Math.max(most, frames)
  }
  assert.ok(most >= 1000, `the WAL held ${most} frames at most`)
  assert.ok(restarted, 'the WAL was restarted after a checkpoint, not grown without end')
  assert.ok(statSync(path).size > 4 * 1024 * 1024, 'the checkpoint copied pages into the database file')
  // A restarted WAL is written over from its start: the file is not truncated (below 64 MiB), so
  // its frames go into blocks already allocated.
  assert.ok(statSync(`${path}-wal`).size >= most * 4096, `the WAL file (${statSync(`${path}-wal`).size} bytes) kept the size of ${most} frames`)
  // What asks for a checkpoint is the frames the WAL holds, not its file's size: a few small
  // writes into the large file ask for none.
  await new Promise(resolve => setTimeout(resolve, 250)) // past the least interval between two checkpoints
  const checkpoints = store.stats.checkpoints
  for (let i = 0; i < 5; i++) await store.create({ id: BigInt(1_000_000 + i), name: 'small' })
  assert.ok(walOf(store).log < 1000)
  assert.equal(store.stats.checkpoints, checkpoints, 'no checkpoint for a WAL of a few frames in a large file')
  assert.equal(statSync(`${path}-wal`).ino, inode, 'the -wal on disk is still the file the store syncs')
  assert.equal(fstatSync(internals.walFd).ino, inode)
})

test('under writes that never pause, the WAL is made to restart past 4,000 frames: it stays near that bound', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  // Syncs that return at once: the writer is then never idle, the case where a checkpoint finds
  // the WAL's last frames uncopied every time, whatever the disk.
  store.wal.syncWal = (_fd, done) => setImmediate(() => done(null))
  let most = 0
  let restarts = 0
  let previous = 0
  let id = 0
  const until = Date.now() + 20_000
  while (store.stats.checkpoints < 12 && Date.now() < until) {
    // The next batch is asked for as soon as the last is answered.
    await Promise.all(Array.from({ length: 200 }, () => store.create({ id: BigInt(++id), name: `plant ${id}`, tag: 'steady' })))
    const frames = walOf(store).log
    if (frames < previous) restarts++
    previous = frames
    most = Math.max(most, frames)
  }
  assert.ok(store.stats.checkpoints >= 12, `checkpoints: ${store.stats.checkpoints} in ${id} writes`)
  // Seen here: a restart every two or three checkpoints, at most 5,400–7,900 frames; with PASSIVE
  // checkpoints alone, no restart at all and the WAL still growing (17,000 frames after eight).
  assert.ok(restarts >= 2, `${restarts} restarts in ${store.stats.checkpoints} checkpoints`)
  assert.ok(most < 16_000, `the WAL held ${most} frames at most`)
})

test('writes after close are refused as unavailable (503), not lost silently and not stored', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  await store.close()
  await assert.rejects(store.create({ id: 1n, name: 'late' }), StoreUnavailableError)
  const reopened = new SqliteStore(path)
  t.after(() => reopened.close())
  assert.equal(await reopened.get(1n), undefined)
})

test('a write by another process on the same file shows on the next read', async (t) => {
  const path = join(tempDir(t), 'shared.db')
  const server = new SqliteStore(path)
  const other = new SqliteStore(path) // stands for a second process: its own connections and writer
  t.after(async () => { await server.close(); await other.close() })
  await server.create({ id: 1n, name: 'Fern' })
  assert.deepEqual((await server.get(1n))?.plant, { id: 1n, name: 'Fern' })
  await other.replace(1n, { name: 'Moss' })
  assert.deepEqual((await server.get(1n))?.plant, { id: 1n, name: 'Moss' })
  await other.remove(1n)
  assert.equal(await server.get(1n), undefined)
})
