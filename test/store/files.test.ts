import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { chmodSync, copyFileSync, existsSync, mkdirSync, statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { pathToFileURL } from 'node:url'
import { Worker } from 'node:worker_threads'
import { SqliteStore } from '../../src/store/sqlite.js'
import { ROOT, tempDir } from '../helpers.js'

/** The permission bits of `path`, as octal text: '600'. */
function mode (path: string): string {
  return (statSync(path).mode & 0o777).toString(8)
}

/** Runs the test under the most common umask, 022, whatever the machine's is. */
function withUmask022 (t: TestContext): void {
  const before = process.umask(0o022)
  t.after(() => { process.umask(before) })
}

/** How many plants the database file at `path` holds when opened alone, on a copy of it elsewhere. */
function plantsInCopyOf (t: TestContext, path: string): number {
  const copy = join(tempDir(t), 'copy.db')
  copyFileSync(path, copy)
  const db = openDatabase(copy, { readonly: true })
  try {
    return (db.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n
  } finally {
    db.close()
  }
}

/** No WAL with content beside the database: either none at all, or an empty one. */
function walIsEmpty (path: string): boolean {
  return !existsSync(`${path}-wal`) || statSync(`${path}-wal`).size === 0
}

test('a new data directory is 0700 and the database, its -wal and its -shm are 0600, under umask 022', async (t) => {
  withUmask022(t)
  const dir = join(tempDir(t), 'data', 'nested')
  const path = join(dir, 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  await store.create({ id: 1n, name: 'Fern' })
  assert.equal(mode(dir), '700')
  assert.equal(mode(join(dir, '..')), '700', 'every directory it had to create')
  for (const file of [path, `${path}-wal`, `${path}-shm`]) assert.equal(mode(file), '600', file)
})

test('a directory that exists keeps its mode; a database file that exists is tightened to 0600', async (t) => {
  withUmask022(t)
  const dir = join(tempDir(t), 'shared')
  mkdirSync(dir)
  chmodSync(dir, 0o755)
  const path = join(dir, 'plantstore.db')
  const old = new SqliteStore(path)
  await old.create({ id: 1n, name: 'Fern' })
  await old.close()
  chmodSync(path, 0o644) // as versions before this one left it
  writeFileSync(`${path}-wal`, '')
  chmodSync(`${path}-wal`, 0o644)
  const store = new SqliteStore(path)
  t.after(() => store.close())
  await store.create({ id: 2n, name: 'Moss' })
  assert.equal(mode(dir), '755', 'the operator\'s directory is left alone')
  for (const file of [path, `${path}-wal`, `${path}-shm`]) assert.equal(mode(file), '600', file)
})

test('a clean close leaves a self-contained .db: a copy of that file alone holds every plant, and no WAL with content remains', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  for (let id = 1n; id <= 50n; id++) await store.create({ id, name: `Plant ${id}` })
  await store.get(1n) // the reader has used the file too
  await store.close()
  await store.close() // twice is harmless
  assert.ok(walIsEmpty(path))
  assert.equal(plantsInCopyOf(t, path), 50)
})

// Several processes starting at once on a new nested directory met this, rarely (3 in 1,440): one
// found a level made by another between its two tries, or its parent made by another just after
// its own try failed, and gave up with EEXIST or ENOENT. Threads released together make it often.
test('threads making one new nested directory at the same moment all succeed, round after round', async (t) => {
  withUmask022(t)
  const base = tempDir(t)
  const rounds = 300
  const threads = 4
  const code = `const { workerData, parentPort } = require('node:worker_threads')
    import(workerData.module).then(({ makePrivate }) => {
      const released = new Int32Array(workerData.shared)
      const failures = []
      for (let round = 0; round < workerData.rounds; round++) {
        Atomics.add(released, 1, 1)
        while (Atomics.load(released, 0) <= round) {} // every thread waits here for the same round
        try { makePrivate(workerData.base + '/' + round + '/a/b/c/plantstore.db') } catch (error) { failures.push(error.message) }
      }
      parentPort.postMessage(failures)
    })`
  const shared = new SharedArrayBuffer(8)
  const released = new Int32Array(shared)
  const workerData = { module: pathToFileURL(join(ROOT, 'dist/store/sqlite-files.js')).href, shared, base, rounds }
  const workers = Array.from({ length: threads }, () => new Worker(code, { eval: true, workerData }))
  t.after(async () => { await Promise.all(workers.map(async worker => await worker.terminate())) })
  const failures = Promise.all(workers.map(async worker => await new Promise<string[]>((resolve, reject) => worker.once('message', resolve).once('error', reject))))
  for (let round = 0; round < rounds; round++) {
    while (Atomics.load(released, 1) < threads * (round + 1)) { /* every thread at the start line */ }
    Atomics.store(released, 0, round + 1)
  }
  assert.deepEqual((await failures).flat(), [])
  assert.equal(mode(join(base, `${rounds - 1}/a/b/c`)), '700')
})
