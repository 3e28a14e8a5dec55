import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { closeSync, existsSync, openSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { cli, cliAsync, freshDatabase, holdWriteLock, MAIN, tempDir, testStores } from '../helpers.js'
import { CLUSTER_SKIP, primaryAlone } from '../pg-cluster.js'
import { withStore } from '../stored.js'
import { openDatabase } from '../../src/store/sqlite-driver.js'

const ONE_LINE = /^plantstore: [^\n]+\n$/
/** What `tokens list` says on stderr of a store without tokens. */
const NO_TOKENS = 'No tokens in this store; plantstore tokens create --name NAME makes one.\n'
const YEAR_MS = 365.25 * 86_400_000

// The commands on either store.
for (const store of testStores()) {
  describe(store, () => {
    test('tokens commands and migrate take --database-url, without DATABASE_URL and from any directory', async (t) => {
      const database = await freshDatabase(t, store)
      const elsewhere = tempDir(t)
      const url = database.databaseUrl
      const noEnv = { DATABASE_URL: undefined }
      assert.equal(cli(database, ['migrate', '--database-url', url], noEnv, elsewhere).status, 0)
      const created = cli(database, ['tokens', 'create', '--name', 'ci', '--database-url', url], noEnv, elsewhere)
      assert.equal(created.status, 0, created.stderr)
      assert.match(created.stdout, /^pst_\S+\n$/)
      // The same store as the environment names: the flag did not open another one.
      assert.match(cli(database, ['tokens', 'list']).stdout, /^1\tci\t/)
      assert.equal(cli(database, ['tokens', 'list', '--database-url', url], noEnv, elsewhere).stdout, cli(database, ['tokens', 'list']).stdout)
      assert.equal(cli(database, ['tokens', 'revoke', 'ci', '--database-url', url], noEnv, elsewhere).status, 0)
      assert.match(cli(database, ['tokens', 'list']).stdout, /^1\tci\t.*\trevoked /)
      assert.equal(existsSync(join(elsewhere, 'data')), false, 'nothing was created in the current directory')
    })

    if (store === 'postgres') {
      test('a tokens command that makes a store in a PostgreSQL schema without one says so (a forgotten search_path lands in another), without the URL; an existing store is not announced', async (t) => {
        const database = await freshDatabase(t, store)
        const listed = cli(database, ['tokens', 'list'])
        assert.equal(listed.status, 0, listed.stderr)
        assert.deepEqual([listed.stdout, listed.stderr], ['', 'plantstore: there was no store in the PostgreSQL database in DATABASE_URL (its search_path held no plantstore tables), so a new, empty one was made there.\n' + NO_TOKENS])
        assert.deepEqual(cli(database, ['tokens', 'list']).stderr, NO_TOKENS, 'not announced again')
      })
    }

    test('tokens list is tab-separated, one token a line, six columns', async (t) => {
      const database = await freshDatabase(t, store)
      cli(database, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read', '--expires-in', '2w'])
      cli(database, ['tokens', 'create', '--name', 'admin', '--scope', 'admin', '--scope', 'plants:write'])
      const lines = cli(database, ['tokens', 'list']).stdout.trimEnd().split('\n').map(line => line.split('\t'))
      assert.equal(lines.length, 2)
      assert.deepEqual(lines.map(columns => columns.length), [6, 6])
      assert.deepEqual(lines.map(([id, name, scopes, state]) => [id, name, scopes, state]), [['1', 'reader', 'plants:read', 'active'], ['2', 'admin', 'admin,plants:write', 'active']])
      assert.match(lines[0][5], /^expires 20\d\d-/)
      assert.equal(lines[1][5], 'never expires')
    })

    test('tokens list on a store without tokens prints nothing on stdout and says so on stderr', async (t) => {
      const database = await freshDatabase(t, store)
      const empty = cli(database, ['tokens', 'list'])
      assert.equal(empty.status, 0, empty.stderr)
      assert.equal(empty.stdout, '')
      assert.ok(empty.stderr.endsWith(NO_TOKENS), empty.stderr)
      cli(database, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read'])
      const one = cli(database, ['tokens', 'list'])
      assert.equal(one.stdout.split('\n').length, 2, one.stdout)
      assert.equal(one.stderr, '', 'a store with a token lists it, and says nothing else')
    })

    test('tokens list keeps a name stored before names were checked on its own line and column', async (t) => {
      const database = await freshDatabase(t, store)
      // The store takes any name: only the CLI checks them, as older versions did not.
      await withStore(database, async (opened) => await opened.createToken({ name: 'old\tname\nhere', digest: Buffer.alloc(32), scopes: ['plants:read'] }))
      const lines = cli(database, ['tokens', 'list']).stdout.trimEnd().split('\n')
      assert.equal(lines.length, 1)
      assert.deepEqual(lines[0].split('\t').slice(0, 4), ['1', 'old\\tname\\nhere', 'plants:read', 'active'])
    })

    test('an expired token frees its name; the old one stays listed as expired', async (t) => {
      const database = await freshDatabase(t, store)
      // A token whose hour has passed, stored as it was an hour ago: no clock race decides the test.
      await withStore(database, async (opened) => await opened.createToken({ name: 'deploy', digest: randomBytes(32), scopes: ['plants:read', 'plants:write'], expiresAt: new Date(Date.now() - 1000) }))
      const again = cli(database, ['tokens', 'create', '--name', 'deploy'])
      assert.equal(again.status, 0, again.stderr)
      const list = cli(database, ['tokens', 'list']).stdout
      assert.match(list, /^1\tdeploy\t[^\t]+\texpired 20/m)
      assert.match(list, /^2\tdeploy\t[^\t]+\tactive\t/m)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'deploy']).status, 1, 'the new one is active: the name is taken')
      // The name now picks the new token.
      assert.equal(cli(database, ['tokens', 'revoke', 'deploy']).status, 0)
      assert.match(cli(database, ['tokens', 'list']).stdout, /^2\tdeploy\t[^\t]+\trevoked 20/m)
    })

    test('a revoked token frees its name', async (t) => {
      const database = await freshDatabase(t, store)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'ci']).status, 0)
      assert.equal(cli(database, ['tokens', 'revoke', 'ci']).status, 0)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'ci']).status, 0)
    })

    test('revoking a token again by its id changes nothing and says so, with when it was revoked', async (t) => {
      const database = await freshDatabase(t, store)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'ci']).status, 0)
      const first = cli(database, ['tokens', 'revoke', '1'])
      assert.equal(first.stderr, 'Revoked token 1 "ci"; no server accepts it any more.\n')
      const revokedAt = /\trevoked (\S+)\t/.exec(cli(database, ['tokens', 'list']).stdout)?.[1]
      const again = cli(database, ['tokens', 'revoke', '1'])
      assert.equal(again.status, 0, 'revoked is what was asked for')
      assert.equal(again.stderr, `Token 1 "ci" was revoked already, at ${String(revokedAt)}; nothing changed.\n`)
      assert.match(cli(database, ['tokens', 'list']).stdout, new RegExp(`\\trevoked ${String(revokedAt)}\\t`), 'its revocation time unchanged')
    })

    test('revoking a token that expired, by name or by id (its name since taken by another), says it expired, and when; nothing changes', async (t) => {
      const database = await freshDatabase(t, store)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'brief', '--expires-in', '1s']).status, 0)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'short', '--expires-in', '1s']).status, 0)
      await new Promise(resolve => setTimeout(resolve, 1100))
      const byName = cli(database, ['tokens', 'revoke', 'brief'])
      assert.equal(byName.status, 0)
      assert.match(byName.stderr, /^Token 1 "brief" expired, at \S+; nothing changed\.\n$/)
      assert.match(cli(database, ['tokens', 'list']).stdout, /^1\tbrief\t[^\t]+\texpired /m)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'short']).status, 0)
      const expiresAt = /^2\tshort\t.*\texpires (\S+)/m.exec(cli(database, ['tokens', 'list']).stdout)?.[1]
      const again = cli(database, ['tokens', 'revoke', '2'])
      assert.equal(again.status, 0)
      assert.equal(again.stderr, `Token 2 "short" expired, at ${String(expiresAt)}; nothing changed.\n`)
    })

    test('revoking by id a token that another process revoked a moment ago returns only once no server can accept it any more', async (t) => {
      const database = await freshDatabase(t, store)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'ci']).status, 0)
      await withStore(database, async (opened) => { await opened.revokeToken('ci') })
      const started = Date.now()
      const again = cli(database, ['tokens', 'revoke', '1'])
      assert.match(again.stderr, /^Token 1 "ci" was revoked already, at /)
      const took = Date.now() - started
      assert.ok(took >= 900, `returned ${took} ms after the other revocation: a server may have looked the token up just before it, and keeps that a second`)
    })

    test('lifetimes are above 0 and capped at 10 years, as long as ten calendar years can be: 521w and 3653d are accepted, longer, zero or malformed ones refused with one line', async (t) => {
      const database = await freshDatabase(t, store)
      for (const lifetime of ['999999w', '3654d', '522w', '87673h', '9999999999s', '99999999999999999999d', `${'9'.repeat(400)}s`]) {
        const result = cli(database, ['tokens', 'create', '--name', 'long', '--expires-in', lifetime])
        assert.equal(result.status, 1, lifetime)
        assert.equal(result.stdout, '')
        assert.equal(result.stderr, `plantstore: --expires-in is at most 10 years (3653d or 521w), not "${lifetime}".\n`)
      }
      for (const lifetime of ['0s', '0d', '30', '1.5d', '1y']) {
        const result = cli(database, ['tokens', 'create', '--name', 'odd', '--expires-in', lifetime])
        assert.equal(result.stderr, `plantstore: --expires-in takes a whole number above 0 and a unit (s, m, h, d, w), such as 30d, not "${lifetime}".\n`, lifetime)
      }
      for (const [name, lifetime] of [['weeks', '521w'], ['days', '3653d'], ['hours', '87672h']]) {
        const result = cli(database, ['tokens', 'create', '--name', name, '--expires-in', lifetime])
        assert.equal(result.status, 0, `${lifetime}: ${result.stderr}`)
      }
      const expiries = cli(database, ['tokens', 'list']).stdout.trimEnd().split('\n').map(line => Date.parse(line.split('\t')[5].replace('expires ', '')))
      for (const expiry of expiries) assert.ok(expiry > Date.now() + 9.9 * YEAR_MS && expiry <= Date.now() + 3653 * 86_400_000, new Date(expiry).toISOString())
    })
  })
}

// Refused before any store is opened, or about the SQLite file and the process: on SQLite only.
test('a tokens command that creates a new store says so on stderr with its absolute path; an existing store is not announced', (t) => {
  const dir = tempDir(t)
  const first = cli(dir, ['tokens', 'list'], { DATABASE_URL: undefined }, dir)
  assert.equal(first.status, 0)
  assert.equal(first.stdout, '')
  assert.ok(first.stderr.endsWith(NO_TOKENS), first.stderr)
  assert.match(first.stderr.slice(0, -NO_TOKENS.length), ONE_LINE)
  assert.ok(first.stderr.includes(`there was no store at ${join(dir, 'data', 'plantstore.db')}, so a new, empty one was made there`), first.stderr)
  assert.ok(existsSync(join(dir, 'data', 'plantstore.db')))
  const again = cli(dir, ['tokens', 'list'], { DATABASE_URL: undefined }, dir)
  assert.equal(again.stderr, NO_TOKENS, 'not announced again')
})

// A tester's: other tools keep a schema_version with plantstore's very columns; such a file was
// migrated (tables added, switched to WAL) and then failed. Plantstore's names its first migration.
test('a SQLite file whose schema_version has plantstore\'s columns but another tool\'s rows, or holds only views, is refused and left as it was', (t) => {
  const dir = tempDir(t)
  const schemaVersion = 'CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)'
  const files = {
    'rows.db': `${schemaVersion}; INSERT INTO schema_version VALUES (1, 'add_orders', 1700000000), (3, 'add_totals', 1700000001); CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)`,
    'no-rows.db': `${schemaVersion}; CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)`,
    'views.db': 'CREATE VIEW answer AS SELECT 42 AS value'
  }
  for (const [name, sql] of Object.entries(files)) {
    const path = join(dir, name)
    const db = openDatabase(path)
    db.exec(sql)
    db.close()
    const before = readFileSync(path)
    const refused = `plantstore: Cannot open the database at ${path}: it holds another program's database (tables, but not plantstore's schema); give plantstore a file of its own.\n`
    for (const args of [['migrate'], ['tokens', 'create', '--name', 'ci']]) {
      const result = cli({ databaseUrl: path }, args)
      assert.deepEqual([result.status, result.stdout, result.stderr], [1, '', refused], `${name}: ${args.join(' ')}`)
    }
    const exported = cli({ databaseUrl: path }, ['export'])
    assert.deepEqual([exported.status, exported.stderr], [1, `plantstore: There is no store at ${path}.\n`], `${name}: export, one line`)
    assert.ok(readFileSync(path).equals(before), `${name} is unchanged`)
  }
  assert.deepEqual(readdirSync(dir).sort(), Object.keys(files).sort())
})

test('a SQLite file holding another program\'s tables is refused by every command and by serve, and left as it was (bytes, mode, no -wal)', (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'crm.db')
  const db = openDatabase(path)
  db.exec("CREATE TABLE customers (name TEXT); INSERT INTO customers VALUES ('Ada'); CREATE TABLE plants (x)") // a table of plantstore's name, too
  db.exec('CREATE TABLE schema_version (version INT, installed_on TEXT); INSERT INTO schema_version VALUES (1, \'2020\')') // another tool's, of the same name
  db.close()
  const before = { bytes: readFileSync(path), mode: statSync(path).mode }
  const refused = `plantstore: Cannot open the database at ${path}: it holds another program's database (tables, but not plantstore's schema); give plantstore a file of its own.\n`
  for (const args of [['tokens', 'list'], ['tokens', 'create', '--name', 'ci'], ['migrate'], ['import']]) {
    const result = cli({ databaseUrl: path }, args)
    assert.deepEqual([result.status, result.stdout, result.stderr], [1, '', refused], args.join(' '))
  }
  const served = spawnSync(process.execPath, [MAIN, 'serve', '--port', '0'], { env: { ...process.env, DATABASE_URL: path }, encoding: 'utf8', timeout: 20_000 })
  assert.equal(served.status, 1, served.stderr)
  assert.ok(served.stderr.includes("it holds another program's database"), served.stderr)
  assert.ok(readFileSync(path).equals(before.bytes), 'the file is unchanged')
  assert.equal(statSync(path).mode, before.mode)
  assert.deepEqual(readdirSync(dir), ['crm.db'])

  // A FIFO is no database either, and no command waits on it for a writer.
  const fifo = join(dir, 'pipe')
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
  for (const args of [['tokens', 'list'], ['export']]) {
    const result = spawnSync(process.execPath, [MAIN, ...args], { env: { ...process.env, DATABASE_URL: fifo }, encoding: 'utf8', timeout: 20_000 })
    assert.equal(result.status, 1, `${args.join(' ')}: ${result.stderr}`)
    assert.match(result.stderr, /^plantstore: [^\n]+\n$/)
  }
  rmSync(fifo)

  // A store whose making stopped after its first table (a start killed then) is plantstore's: it is made whole.
  const begun = join(dir, 'begun.db')
  const half = openDatabase(begun)
  half.exec('CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)')
  half.close()
  const listed = cli({ databaseUrl: begun }, ['tokens', 'list'])
  assert.equal(listed.status, 0, listed.stderr)
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

test('a token whose stdout goes to /dev/null, given so or closed, is not made: one line, exit 1, no token', (t) => {
  const dir = tempDir(t)
  const env = { ...process.env, DATABASE_URL: join(dir, 'plantstore.db') }
  assert.equal(cli(dir, ['migrate']).status, 0)
  const devNull = spawnSync(process.execPath, [MAIN, 'tokens', 'create', '--name', 'nowhere'], { env, stdio: ['ignore', 'ignore', 'pipe'], encoding: 'utf8' })
  assert.equal(devNull.status, 1)
  assert.equal(devNull.stderr, 'plantstore: stdout goes to /dev/null (or was closed), where no one would see the token, which is shown only once; no token was created. Send stdout to a file or a variable.\n')
  const closed = spawnSync('bash', ['-c', `"${process.execPath}" "${MAIN}" tokens create --name closed >&-`], { env, encoding: 'utf8' })
  assert.equal(closed.status, 1, closed.stderr)
  assert.equal(cli(dir, ['tokens', 'list']).stdout, '', 'no token at all')
})

test('a token that cannot be written to stdout (a full disk, a reader gone) is revoked, unseen: one line, exit 1, its name free again', async (t) => {
  const dir = tempDir(t)
  const env = { ...process.env, DATABASE_URL: join(dir, 'plantstore.db') }
  assert.equal(cli(dir, ['migrate']).status, 0)
  const full = openSync('/dev/full', 'w')
  t.after(() => closeSync(full))
  const onFullDisk = spawnSync(process.execPath, [MAIN, 'tokens', 'create', '--name', 'full'], { env, stdio: ['ignore', full, 'pipe'], encoding: 'utf8' })
  assert.equal(onFullDisk.status, 1)
  assert.match(onFullDisk.stderr, /^plantstore: Could not write the token to stdout \(ENOSPC: no space left on device, write\); token 1 was revoked, unseen\.\n$/)
  const gone = spawn(process.execPath, [MAIN, 'tokens', 'create', '--name', 'gone'], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  gone.stdout.destroy() // the reader is gone before the token is written
  let stderr = ''
  gone.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  assert.equal(await new Promise(resolve => gone.once('exit', resolve)), 1)
  assert.match(stderr, /^plantstore: Could not write the token to stdout \(EPIPE[^\n]*\); token 2 was revoked, unseen\.\n$/)
  // A reader that is there but slow (its pipe full when the token comes) gets the token: it is not revoked.
  const slow = spawnSync('bash', ['-c', `(head -c 65536 /dev/zero; "${process.execPath}" "${MAIN}" tokens create --name slow) | (sleep 1; wc -c)`], { env, encoding: 'utf8' })
  assert.equal(slow.status, 0, slow.stderr)
  assert.match(slow.stderr, /^Created token 3 "slow"/)
  assert.equal(Number(slow.stdout.trim()), 65536 + 'pst_'.length + 43 + 1, 'the zeros, then the token and its line end')
  assert.equal(cli(dir, ['tokens', 'revoke', 'slow']).status, 0, 'slow was active')
  const listed = cli(dir, ['tokens', 'list']).stdout.trim().split('\n').filter(line => !line.includes('\tslow\t')).map(line => line.split('\t').slice(1, 4))
  assert.deepEqual(listed.map(([name, , state]) => [name, state.split(' ')[0]]), [['full', 'revoked'], ['gone', 'revoked']])
  for (const name of ['full', 'gone']) assert.equal(cli(dir, ['tokens', 'create', '--name', name]).status, 0, `${name} is free again`)
  // Any other command's output that cannot be written is one line too, not a stack trace.
  assert.equal(spawnSync(process.execPath, [MAIN, 'import'], { env, input: '{"id": 1, "name": "Fern"}\n' }).status, 0)
  for (const args of [['tokens', 'list'], ['export']]) {
    const result = spawnSync(process.execPath, [MAIN, ...args], { env, stdio: ['ignore', full, 'pipe'], encoding: 'utf8' })
    assert.equal(result.status, 1, args.join(' '))
    assert.match(result.stderr, ONE_LINE, args.join(' '))
    assert.match(result.stderr, /no space left on device/, args.join(' '))
  }
})

test('PostgreSQL, a synchronous standby away: a token create or revoke the store does not confirm in time says so (made or not, unseen), never that nothing happened', { skip: CLUSTER_SKIP ?? false }, async (t) => {
  const primary = await primaryAlone(t)
  const database = { databaseUrl: primary.url }
  assert.equal(cli(database, ['tokens', 'create', '--name', 'before']).status, 0)
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')

  const created = cli(database, ['tokens', 'create', '--name', 'during'])
  assert.equal(created.status, 1)
  assert.equal(created.stdout, '', 'no token shown')
  assert.match(created.stderr, /^plantstore: The store did not confirm the token in time \(.*\): it may have been made, unseen\. If `plantstore tokens list` shows "during" active, revoke it\.\n$/)
  const revoked = cli(database, ['tokens', 'revoke', 'before'])
  assert.equal(revoked.status, 1)
  assert.match(revoked.stderr, /^plantstore: The store did not confirm the revocation in time \(.*\): it may have been made; `plantstore tokens list` shows whether "before" is revoked\.\n$/)

  await primary.query("ALTER SYSTEM SET synchronous_standby_names = ''")
  await primary.query('SELECT pg_reload_conf()')
  // PostgreSQL committed both locally: what the messages said may have happened, did.
  assert.match(cli(database, ['tokens', 'list']).stdout, /^1\tbefore\t.*\trevoked .*\n2\tduring\t.*\tactive/s)
})

test('SQLite, its write lock held by another process: a token create or revoke refused unstored says the store is unavailable, not that it may have been made', async (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'before']).status, 0)
  await holdWriteLock(t, join(dir, 'plantstore.db'), 8000)
  for (const args of [['tokens', 'create', '--name', 'during'], ['tokens', 'revoke', 'before']]) {
    const result = await cliAsync(args, { DATABASE_URL: join(dir, 'plantstore.db') })
    assert.equal(result.status, 1)
    assert.match(result.stderr, /^plantstore: The store is unavailable: The write waited for the database past its deadline/, args.join(' '))
  }
})
