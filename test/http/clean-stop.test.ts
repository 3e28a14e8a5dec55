import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { copyFileSync, existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { call, holdWriteLock, startServer, tempDir } from '../helpers.js'

test('after SIGTERM the .db file alone holds every plant: a copy of just that file has them all, and no WAL with content remains', async (t) => {
  const previous = process.umask(0o022) // the server inherits it
  t.after(() => { process.umask(previous) })
  const server = await startServer(t)
  for (let id = 1; id <= 30; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)
  for (const file of [server.dbPath, `${server.dbPath}-wal`, `${server.dbPath}-shm`]) {
    assert.equal((statSync(file).mode & 0o777).toString(8), '600', `${file} while the server runs`)
  }

  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  assert.ok(!existsSync(`${server.dbPath}-wal`) || statSync(`${server.dbPath}-wal`).size === 0, 'no WAL with content')

  const copy = join(tempDir(t), 'copy.db') // what a backup that copies the .db file alone takes
  copyFileSync(server.dbPath, copy)
  const db = openDatabase(copy, { readonly: true })
  t.after(() => db.close())
  assert.equal((db.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n, 30)
})

test('a stop while another process reads the store (an export) cannot empty the WAL: it says so at warn, exits 0 on time, and the next start has every plant', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '2' } })
  for (let id = 1; id <= 3; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)
  // A reader with a snapshot, as an export holds one: what is written after it cannot be copied into the .db until it ends.
  const reader = openDatabase(server.dbPath, { readonly: true })
  t.after(() => { if (reader.open) reader.close() })
  reader.prepare('BEGIN').run()
  reader.prepare('SELECT count(*) FROM plants').get()
  for (let id = 4; id <= 6; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)

  const stopping = Date.now()
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  assert.ok(Date.now() - stopping < 2500, `stopped in ${Date.now() - stopping} ms`)
  const warned = server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.level === 40)
  assert.deepEqual(warned.map(line => line.msg), ['stopped; the last writes are in the WAL, not yet in the database file: another process was using the store (an export, a backup, an import), or a sync failed; keep the -wal file beside the .db if you copy it (the next start empties it)'])
  assert.ok(statSync(`${server.dbPath}-wal`).size > 0, 'the WAL is there')
  reader.prepare('COMMIT').run()
  reader.close()

  const again = await startServer(t, { dir: server.dir, token: server.token })
  assert.deepEqual((await call(again, 'GET', '/plants')).body.map((plant: { id: number }) => plant.id), [1, 2, 3, 4, 5, 6])
})

test('a stop while another process reads the store up to date (it began after the last write) leaves the .db whole at once, and says nothing', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '4' } })
  for (let id = 1; id <= 6; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)
  const reader = openDatabase(server.dbPath, { readonly: true })
  t.after(() => { if (reader.open) reader.close() })
  reader.prepare('BEGIN').run()
  assert.equal((reader.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n, 6)

  const stopping = Date.now()
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  assert.ok(Date.now() - stopping < 2000, `stopped in ${Date.now() - stopping} ms: no wait for a reader that holds back nothing`)
  assert.deepEqual(server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.level === 40), [])
  const copy = join(tempDir(t), 'copy.db') // the .db alone
  copyFileSync(server.dbPath, copy)
  const db = openDatabase(copy, { readonly: true })
  t.after(() => db.close())
  assert.equal((db.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n, 6)
})

test('a stop while another process holds the write lock still copies every commit into the .db (it needs no lock for that), and says nothing', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '2' } })
  for (let id = 1; id <= 6; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)
  await holdWriteLock(t, server.dbPath, 5000) // an import, say: it began after the last write
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  assert.deepEqual(server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.level === 40), [])
  const copy = join(tempDir(t), 'copy.db') // the .db alone
  copyFileSync(server.dbPath, copy)
  const db = openDatabase(copy, { readonly: true })
  t.after(() => db.close())
  assert.equal((db.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n, 6)
})
