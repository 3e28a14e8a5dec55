import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { copyFileSync, existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { call, holdWriteLock, startServer, tempDir, type Server } from '../helpers.js'

/** Plants `from` to `to`, each answered 200. */
async function postPlants (server: Server, from: number, to: number): Promise<void> {
  for (let id = from; id <= to; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)
}

/** How many plants a copy of the `.db` file alone holds: what a backup that copies that file takes. */
function plantsInTheFileAlone (t: TestContext, dbPath: string): number {
  const copy = join(tempDir(t), 'copy.db')
  copyFileSync(dbPath, copy)
  const db = openDatabase(copy, { readonly: true })
  t.after(() => db.close())
  return (db.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n
}

/** A reader in another process's place, its snapshot taken now (as an export holds one), ended after the test. */
function readerWithSnapshot (t: TestContext, dbPath: string): ReturnType<typeof openDatabase> {
  const reader = openDatabase(dbPath, { readonly: true })
  t.after(() => { if (reader.open) reader.close() })
  reader.prepare('BEGIN').run()
  reader.prepare('SELECT count(*) FROM plants').get()
  return reader
}

/** The messages of the server's warn lines. */
const warnings = (server: Server): string[] => server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.level === 40).map(line => line.msg)

/** Stops the server with SIGTERM; answers how long it took to exit (code 0). */
async function stop (server: Server): Promise<number> {
  const stopping = Date.now()
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  return Date.now() - stopping
}

test('after SIGTERM the .db file alone holds every plant: a copy of just that file has them all, and no WAL with content remains', async (t) => {
  const previous = process.umask(0o022) // the server inherits it
  t.after(() => { process.umask(previous) })
  const server = await startServer(t)
  await postPlants(server, 1, 30)
  for (const file of [server.dbPath, `${server.dbPath}-wal`, `${server.dbPath}-shm`]) {
    assert.equal((statSync(file).mode & 0o777).toString(8), '600', `${file} while the server runs`)
  }
  await stop(server)
  assert.ok(!existsSync(`${server.dbPath}-wal`) || statSync(`${server.dbPath}-wal`).size === 0, 'no WAL with content')
  assert.equal(plantsInTheFileAlone(t, server.dbPath), 30)
})

test('a stop while another process reads the store (an export) cannot empty the WAL: it says so at warn, exits 0 on time, and the next start has every plant', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '2' } })
  await postPlants(server, 1, 3)
  // What is written after the reader's snapshot cannot be copied into the .db until it ends.
  const reader = readerWithSnapshot(t, server.dbPath)
  await postPlants(server, 4, 6)
  const ms = await stop(server)
  assert.ok(ms < 2500, `stopped in ${ms} ms`)
  assert.deepEqual(warnings(server), ['stopped; the last writes are in the WAL, not yet in the database file: another process was using the store (an export, a backup, an import), or a sync failed; keep the -wal file beside the .db if you copy it (the next start empties it)'])
  assert.ok(statSync(`${server.dbPath}-wal`).size > 0, 'the WAL is there')
  reader.prepare('COMMIT').run()
  reader.close()

  const again = await startServer(t, { dir: server.dir, token: server.token })
  assert.deepEqual((await call(again, 'GET', '/plants')).body.map((plant: { id: number }) => plant.id), [1, 2, 3, 4, 5, 6])
})

test('a stop while another process reads the store up to date (it began after the last write) leaves the .db whole at once, and says nothing', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '4' } })
  await postPlants(server, 1, 6)
  readerWithSnapshot(t, server.dbPath)
  const ms = await stop(server)
  assert.ok(ms < 2000, `stopped in ${ms} ms: no wait for a reader that holds back nothing`)
  assert.deepEqual(warnings(server), [])
  assert.equal(plantsInTheFileAlone(t, server.dbPath), 6)
})

test('a stop while another process holds the write lock still copies every commit into the .db (it needs no lock for that), and says nothing', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '2' } })
  await postPlants(server, 1, 6)
  await holdWriteLock(t, server.dbPath, 5000) // an import, say: it began after the last write
  await stop(server)
  assert.deepEqual(warnings(server), [])
  assert.equal(plantsInTheFileAlone(t, server.dbPath), 6)
})
