import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { copyFileSync, existsSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { call, startServer, tempDir } from '../helpers.js'

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
