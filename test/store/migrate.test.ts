import assert from 'node:assert/strict'
import Database from 'better-sqlite3'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { test } from 'node:test'
import { migrationsOf } from '../../src/store/migrations.js'
import { MAIN, tempDir } from '../helpers.js'

/** Runs `plantstore migrate` on `path`; resolves with its exit code and stderr. */
function migrate (path: string): Promise<{ code: number | null, stderr: string }> {
  return new Promise(resolve => {
    const child = spawn(process.execPath, [MAIN, 'migrate', '--database-url', path], { stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    child.once('exit', code => resolve({ code, stderr }))
  })
}

test('six processes migrating one new file at once all succeed, and the schema is made once', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const results = await Promise.all(Array.from({ length: 6 }, () => migrate(path)))
  for (const { code, stderr } of results) assert.equal(code, 0, stderr)
  const newest = migrationsOf('sqlite').length
  const db = new Database(path, { readonly: true })
  t.after(() => db.close())
  assert.deepEqual(db.prepare('SELECT version FROM schema_version ORDER BY version').all().map(row => Number((row as { version: bigint }).version)), Array.from({ length: newest }, (_, i) => i + 1))
  assert.equal(db.pragma('journal_mode', { simple: true }), 'wal')
})

test('a start finds a current schema without the write lock, so a transaction held elsewhere does not hold it up', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  assert.equal((await migrate(path)).code, 0)
  // The same start without a lock held, as the yardstick: a process start alone takes seconds on a busy machine.
  let started = Date.now()
  assert.equal((await migrate(path)).code, 0)
  const unlocked = Date.now() - started
  const holder = new Database(path)
  holder.exec('BEGIN IMMEDIATE')
  t.after(() => { holder.exec('ROLLBACK'); holder.close() })
  started = Date.now()
  const again = await migrate(path)
  assert.equal(again.code, 0, again.stderr)
  const locked = Date.now() - started
  // Plus, by design, the close's TRUNCATE checkpoint waiting out its 2 s for the held lock; waiting
  // for the lock to read the schema would add the 5 s busy timeout and then fail.
  assert.ok(locked < unlocked + 2000 + 1500, `took ${locked} ms, against ${unlocked} ms with no lock held`)
})

test('a schema newer than this plantstore knows is refused in one sentence', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  assert.equal((await migrate(path)).code, 0)
  const db = new Database(path)
  db.prepare("INSERT INTO schema_version (version, name, applied_at) VALUES (999, '999-future.sql', 0)").run()
  db.close()
  const { code, stderr } = await migrate(path)
  assert.equal(code, 1)
  assert.match(stderr, /^plantstore: Cannot open the database at .*: The database schema is version 999, newer than this plantstore knows \(\d+\); upgrade plantstore\.\n$/)
})
