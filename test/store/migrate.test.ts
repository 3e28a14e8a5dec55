import assert from 'node:assert/strict'
import { openDatabase, SQLITE_BINDING } from '../../src/store/sqlite-driver.js'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { chmodSync, existsSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { migrationsOf } from '../../src/store/migrations.js'
import { refuseForeignFile, storeAt } from '../../src/store/sqlite-schema.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import { openWriter } from '../../src/store/sqlite-writes.js'
import { MAIN, ROOT, tempDir } from '../helpers.js'

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
  const db = openDatabase(path, { readonly: true })
  t.after(() => db.close())
  assert.deepEqual(db.prepare('SELECT version FROM schema_version ORDER BY version').all().map(row => Number((row as { version: bigint }).version)), Array.from({ length: newest }, (_, i) => i + 1))
  assert.equal(db.pragma('journal_mode', { simple: true }), 'wal')
})

// The six processes above met this once in a suite run: one read the file between another's
// first table and its next statements, statement by statement, and took the store being made for
// another program's database. Here a process makes plantstore's schema_version table and drops it
// again as fast as it can, so that every check of the file falls between the two.
test('a file whose store another process is making right now is never taken for another program\'s database', async (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'plantstore.db')
  const done = join(dir, 'done')
  const script = `const db = new (require(${JSON.stringify(SQLITE_BINDING)}))(${JSON.stringify(path)}); db.pragma('journal_mode = WAL'); db.pragma('busy_timeout = 5000');
    process.stdout.write('making\\n'); const until = Date.now() + 800
    while (Date.now() < until) { db.exec('CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)'); db.exec('DROP TABLE schema_version') }
    db.close(); require('node:fs').writeFileSync(${JSON.stringify(done)}, '')`
  const maker = spawn(process.execPath, ['-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  const exited = new Promise<number | null>(resolve => maker.once('exit', resolve))
  await Promise.race([new Promise(resolve => maker.stdout.once('data', resolve)), exited.then(code => { throw new Error(`the maker exited (${code}) before it began`) })])
  // Checks for as long as the maker makes (however slow a loaded machine makes both), at most 10 s.
  let checks = 0
  for (const until = Date.now() + 10_000; !existsSync(done) && Date.now() < until; checks++) {
    refuseForeignFile(path) // throws where it takes the file for another program's
    assert.equal(storeAt(path), 0, 'and the file is read: no store in it yet') // not a read that failed
  }
  assert.equal(await exited, 0)
  assert.ok(existsSync(done), 'the maker finished')
  assert.ok(checks >= 10, `only ${checks} checks ran while the maker made`)
})

/** Holds `path` locked (exclusive locking mode) in a process of its own for `ms`; resolves once held. */
async function holdFile (path: string, ms: number): Promise<ChildProcess> {
  const script = `const db = new (require(${JSON.stringify(SQLITE_BINDING)}))(${JSON.stringify(path)}); db.pragma('locking_mode = EXCLUSIVE'); db.exec('BEGIN EXCLUSIVE');
    process.stdout.write('held\\n'); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ${ms}); db.exec('COMMIT'); db.close()`
  const child = spawn(process.execPath, ['-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  await new Promise((resolve, reject) => {
    child.stdout!.once('data', resolve)
    child.once('exit', code => reject(new Error(`the holder exited (${code}) before it held the file`)))
  })
  return child
}

// Six processes opening one new file at once met this, rarely: one's store found the file held
// by another's start or close (its WAL's recovery, its last checkpoint) while preparing its
// statements, which a connection without a busy timeout cannot wait for.
test('the write connection, opening while another process holds the file for a moment, waits for it and opens', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  await new SqliteStore(path).close()
  const holder = await holdFile(path, 500)
  const started = Date.now()
  const writer = openWriter(path)
  writer.db.close()
  assert.ok(Date.now() - started >= 300, `opened after ${Date.now() - started} ms, while the file was held`)
  await new Promise(resolve => holder.once('exit', resolve))
})

test('a start finds a current schema without the write lock, so a transaction held elsewhere does not hold it up', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  assert.equal((await migrate(path)).code, 0)
  // The same start without a lock held, as the yardstick: a process start alone takes seconds on a busy machine.
  let started = Date.now()
  assert.equal((await migrate(path)).code, 0)
  const unlocked = Date.now() - started
  const holder = openDatabase(path)
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
  const db = openDatabase(path)
  db.prepare("INSERT INTO schema_version (version, name, applied_at) VALUES (999, '999-future.sql', 0)").run()
  db.close()
  const { code, stderr } = await migrate(path)
  assert.equal(code, 1)
  assert.match(stderr, /^plantstore: Cannot open the database at .*: The database schema is version 999, newer than this plantstore knows \(\d+\); upgrade plantstore\.\n$/)
})

test('serve on a store of a newer plantstore (a backup, in rollback-journal mode) refuses it and leaves it byte for byte as it was, its mode too', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  assert.equal((await migrate(path)).code, 0)
  const db = openDatabase(path)
  db.pragma('journal_mode = DELETE')
  db.prepare("INSERT INTO schema_version (version, name, applied_at) VALUES (999, '999-future.sql', 0)").run()
  db.close()
  chmodSync(path, 0o644) // as a copy may have it: a start that refuses the file does not tighten it
  const before = readFileSync(path)
  const started = spawnSync(process.execPath, [MAIN, 'serve'], { env: { ...process.env, DATABASE_URL: path, PORT: '0' }, encoding: 'utf8', timeout: 20_000 })
  assert.equal(started.status, 1, started.stderr)
  assert.match(started.stderr, /newer than this plantstore knows/)
  assert.ok(readFileSync(path).equals(before), 'the file is unchanged (its journal mode too)')
  assert.equal(statSync(path).mode & 0o777, 0o644, 'and its mode')
  assert.equal(existsSync(`${path}-wal`), false)
})
