import assert from 'node:assert/strict'
import Database from 'better-sqlite3'
import { spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { cli, MAIN, tempDir } from '../helpers.js'

const ONE_LINE = /^plantstore: [^\n]+\n$/
const YEAR_MS = 365.25 * 86_400_000

test('tokens commands and migrate take --database-url, without DATABASE_URL and from any directory', (t) => {
  const dir = tempDir(t)
  const elsewhere = tempDir(t)
  const dbPath = join(dir, 'plantstore.db')
  const noEnv = { DATABASE_URL: undefined }
  assert.equal(cli(dir, ['migrate', '--database-url', dbPath], noEnv, elsewhere).status, 0)
  const created = cli(dir, ['tokens', 'create', '--name', 'ci', '--database-url', dbPath], noEnv, elsewhere)
  assert.equal(created.status, 0, created.stderr)
  assert.match(created.stdout, /^pst_\S+\n$/)
  // The same store as the environment names: the flag did not open another one.
  assert.match(cli(dir, ['tokens', 'list']).stdout, /^1\tci\t/)
  assert.equal(cli(dir, ['tokens', 'list', '--database-url', dbPath], noEnv, elsewhere).stdout, cli(dir, ['tokens', 'list']).stdout)
  assert.equal(cli(dir, ['tokens', 'revoke', 'ci', '--database-url', dbPath], noEnv, elsewhere).status, 0)
  assert.match(cli(dir, ['tokens', 'list']).stdout, /^1\tci\t.*\trevoked /)
  assert.equal(existsSync(join(elsewhere, 'data')), false, 'nothing was created in the current directory')
})

test('a tokens command that creates a new store says so on stderr with its absolute path; an existing store is not announced', (t) => {
  const dir = tempDir(t)
  const first = cli(dir, ['tokens', 'list'], { DATABASE_URL: undefined }, dir)
  assert.equal(first.status, 0)
  assert.equal(first.stdout, '')
  assert.match(first.stderr, ONE_LINE)
  assert.ok(first.stderr.includes(`no store at ${join(dir, 'data', 'plantstore.db')} yet, so a new, empty one is created there`), first.stderr)
  assert.ok(existsSync(join(dir, 'data', 'plantstore.db')))
  const again = cli(dir, ['tokens', 'list'], { DATABASE_URL: undefined }, dir)
  assert.equal(again.stderr, '')
})

test('token names are 1 to 64 of [A-Za-z0-9._-], not all digits; others are refused with one line before any store is made', (t) => {
  const dir = tempDir(t)
  for (const name of ['', 'a'.repeat(65), 'tab\there', 'line\nbreak', 'a b', 'plänt', 'a/b', '123', '0']) {
    const result = cli(dir, ['tokens', 'create', '--name', name])
    assert.equal(result.status, 1, JSON.stringify(name))
    assert.equal(result.stdout, '')
    assert.match(result.stderr, ONE_LINE)
    assert.match(result.stderr, /^plantstore: A token name is 1 to 64 letters, digits, dots, hyphens or underscores, not all digits; ".*" is not\.\n$/)
  }
  assert.equal(existsSync(join(dir, 'plantstore.db')), false)
  for (const name of ['a'.repeat(64), 'x', 'ci.deploy-2_B', '2024-backup', '1.5']) {
    const result = cli(dir, ['tokens', 'create', '--name', name])
    assert.equal(result.status, 0, `${name}: ${result.stderr}`)
  }
})

test('tokens list is tab-separated, one token a line, six columns', (t) => {
  const dir = tempDir(t)
  cli(dir, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read', '--expires-in', '2w'])
  cli(dir, ['tokens', 'create', '--name', 'admin', '--scope', 'admin', '--scope', 'plants:write'])
  const lines = cli(dir, ['tokens', 'list']).stdout.trimEnd().split('\n').map(line => line.split('\t'))
  assert.equal(lines.length, 2)
  assert.deepEqual(lines.map(columns => columns.length), [6, 6])
  assert.deepEqual(lines.map(([id, name, scopes, state]) => [id, name, scopes, state]), [['1', 'reader', 'plants:read', 'active'], ['2', 'admin', 'admin,plants:write', 'active']])
  assert.match(lines[0][5], /^expires 20\d\d-/)
  assert.equal(lines[1][5], 'never expires')
})

test('tokens list keeps a name stored before names were checked on its own line and column', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const old = new Database(join(dir, 'plantstore.db'))
  old.prepare('INSERT INTO tokens (name, digest, scopes, created_at) VALUES (?, ?, ?, ?)').run('old\tname\nhere', Buffer.alloc(32), 'plants:read', Date.now())
  old.close()
  const lines = cli(dir, ['tokens', 'list']).stdout.trimEnd().split('\n')
  assert.equal(lines.length, 1)
  assert.deepEqual(lines[0].split('\t').slice(0, 4), ['1', 'old\\tname\\nhere', 'plants:read', 'active'])
})

test('an expired token frees its name; the old one stays listed as expired', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'deploy', '--expires-in', '1h']).status, 0)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'deploy']).status, 1, 'still active: the name is taken')
  // Its hour passes: moved into the past directly, so that no clock race decides the test.
  const db = new Database(join(dir, 'plantstore.db'))
  db.prepare('UPDATE tokens SET expires_at = ? WHERE name = ?').run(Date.now() - 1000, 'deploy')
  db.close()
  const again = cli(dir, ['tokens', 'create', '--name', 'deploy'])
  assert.equal(again.status, 0, again.stderr)
  const list = cli(dir, ['tokens', 'list']).stdout
  assert.match(list, /^1\tdeploy\t[^\t]+\texpired 20/m)
  assert.match(list, /^2\tdeploy\t[^\t]+\tactive\t/m)
  // The name now picks the new token.
  assert.equal(cli(dir, ['tokens', 'revoke', 'deploy']).status, 0)
  assert.match(cli(dir, ['tokens', 'list']).stdout, /^2\tdeploy\t[^\t]+\trevoked 20/m)
})

test('a revoked token frees its name', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'ci']).status, 0)
  assert.equal(cli(dir, ['tokens', 'revoke', 'ci']).status, 0)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'ci']).status, 0)
})

test('lifetimes are capped at 10 years: 520w and 3650d are accepted, longer ones refused with one line', (t) => {
  const dir = tempDir(t)
  for (const lifetime of ['999999w', '3651d', '522w', '87601h', '9999999999s']) {
    const result = cli(dir, ['tokens', 'create', '--name', 'long', '--expires-in', lifetime])
    assert.equal(result.status, 1, lifetime)
    assert.equal(result.stdout, '')
    assert.equal(result.stderr, `plantstore: --expires-in is at most 10 years (3650d or 521w), not "${lifetime}".\n`)
  }
  for (const [name, lifetime] of [['weeks', '520w'], ['days', '3650d']]) {
    const result = cli(dir, ['tokens', 'create', '--name', name, '--expires-in', lifetime])
    assert.equal(result.status, 0, `${lifetime}: ${result.stderr}`)
  }
  const expiries = cli(dir, ['tokens', 'list']).stdout.trimEnd().split('\n').map(line => Date.parse(line.split('\t')[5].replace('expires ', '')))
  for (const expiry of expiries) assert.ok(expiry > Date.now() + 9.9 * YEAR_MS && expiry <= Date.now() + 10 * YEAR_MS, new Date(expiry).toISOString())
})

test('tokens list into a reader that has gone (| head -1) stops quietly, without a stack trace', async (t) => {
  const dir = tempDir(t)
  for (const name of ['a', 'b']) assert.equal(cli(dir, ['tokens', 'create', '--name', name]).status, 0)
  const child = spawn(process.execPath, [MAIN, 'tokens', 'list'], { env: { ...process.env, DATABASE_URL: join(dir, 'plantstore.db') }, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.destroy() // the reader is gone before the first line is written
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const code = await new Promise(resolve => child.once('exit', resolve))
  assert.equal(stderr, '')
  assert.equal(code, 0)
})
