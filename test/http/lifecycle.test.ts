import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { chmodSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { connect, createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import { BANNER_TOKEN, call, cli, freshDatabase, MAIN, startServer, tempDir, testStores } from '../helpers.js'
import { PG_SKIP, PG_URL } from '../store/postgres-helpers.js'

function startFails (env: NodeJS.ProcessEnv): { status: number | null, stderr: string } {
  const result = spawnSync(process.execPath, [MAIN, 'serve'], { env: { ...process.env, ...env }, encoding: 'utf8', timeout: 10_000 })
  return { status: result.status, stderr: result.stderr }
}

/** One line on stderr, `plantstore: …`, and nothing that looks like a stack trace. */
function assertOneLine (stderr: string, expected: RegExp): void {
  assert.match(stderr, expected)
  assert.equal(stderr.trim().split('\n').length, 1, stderr)
  assert.doesNotMatch(stderr, /\n\s+at /)
}

// The same on either store: the store is opened, and reached, while the server starts and stops.
for (const store of testStores()) {
  describe(store, () => {
    test('GET /healthz and /readyz answer without a token', async (t) => {
      const server = await startServer(t, { store })
      assert.deepEqual((await call(server, 'GET', '/healthz', { token: null })).body, { status: 'ok' })
      assert.deepEqual((await call(server, 'GET', '/readyz', { token: null })).body, { status: 'ready' })
    })

    test('one JSON log line per request, with method, route, status, duration and request id, never a token', async (t) => {
      const server = await startServer(t, { store })
      await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })
      await call(server, 'GET', '/plants/1')
      await call(server, 'GET', '/plants/1', { token: 'pst_' + 'x'.repeat(43) })
      await call(server, 'GET', '/nowhere')
      await new Promise(resolve => setTimeout(resolve, 100))
      const lines = server.stdout().trim().split('\n').map(line => JSON.parse(line))
      const requests = lines.filter(line => line.msg === 'request')
      assert.equal(requests.length, 4)
      assert.deepEqual(requests.map(r => [r.method, r.route, r.status]), [['POST', '/plants', 200], ['GET', '/plants/{id}', 200], ['GET', '/plants/{id}', 401], ['GET', null, 404]])
      for (const r of requests) {
        assert.equal(typeof r.durationMs, 'number')
        assert.match(r.reqId, /^[0-9a-f]{16}-[0-9a-z]+$/)
      }
      assert.equal(new Set(requests.map(r => r.reqId)).size, 4, 'an id each')
      assert.doesNotMatch(server.stdout(), /pst_|authorization|Bearer/i)
    })

    test('a client that leaves before its answer is logged as 499, one that closes its change stream as 200; a scrape of /metrics is logged too', async (t) => {
      const server = await startServer(t, { store })
      const { port } = new URL(server.url)
      const leave = async (head: string): Promise<void> => {
        const socket = connect(Number(port), '127.0.0.1')
        socket.on('error', () => {})
        socket.write(`GET /plants/changes?${head}\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\n\r\n`)
        await new Promise(resolve => setTimeout(resolve, 300))
        socket.destroy()
      }
      await leave('wait=10 HTTP/1.1') // a long poll waiting for a change: nothing was answered yet
      await leave('after=0 HTTP/1.1\r\nAccept: text/event-stream') // a stream: its 200 went out
      await call(server, 'GET', '/metrics', { token: null })
      const deadline = Date.now() + 5000
      let requests: Array<Record<string, unknown>> = []
      while (requests.length < 3 && Date.now() < deadline) {
        await new Promise(resolve => setTimeout(resolve, 50))
        requests = server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.msg === 'request')
      }
      assert.deepEqual(requests.map(r => [r.method, r.route, r.status]), [['GET', '/plants/changes', 499], ['GET', '/plants/changes', 200], ['GET', '/metrics', 200]])
      for (const r of requests) assert.ok(typeof r.durationMs === 'number' && r.durationMs >= 0, JSON.stringify(r))
    })

    test('LOG_LEVEL=warn writes no request lines', async (t) => {
      const server = await startServer(t, { store, env: { LOG_LEVEL: 'warn' } })
      await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })
      await call(server, 'GET', '/plants/1')
      await call(server, 'GET', '/nowhere')
      await new Promise(resolve => setTimeout(resolve, 100))
      assert.equal(server.stdout().trim(), '')
    })

    test('SIGTERM lets a request in flight finish, then exits 0', async (t) => {
      const server = await startServer(t, { store })
      const { port } = new URL(server.url)
      const body = '{"id": 5, "name": "Late bloomer"}'
      const answer = new Promise<string>((resolve, reject) => {
        const socket = connect(Number(port), '127.0.0.1')
        let text = ''
        socket.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('close', () => resolve(text)).on('error', reject)
        // Headers and half the body now; the rest after SIGTERM has been sent.
        socket.write(`POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body.slice(0, 10)}`)
        setTimeout(() => {
          server.process.kill('SIGTERM')
          setTimeout(() => socket.write(body.slice(10)), 300)
        }, 200)
      })
      assert.match(await answer, /^HTTP\/1\.1 200 /)
      assert.equal(await server.exited, 0)
      const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
      assert.equal((await call(again, 'GET', '/plants/5')).body.name, 'Late bloomer')
    })

    test('a start on a taken port fails with one line, and does not use up the first token', async (t) => {
      const database = await freshDatabase(t, store)
      const blocker = createServer().listen(0, '127.0.0.1')
      await new Promise(resolve => blocker.once('listening', resolve))
      t.after(() => blocker.close())
      const { port } = blocker.address() as AddressInfo
      const failed = startFails({ PORT: String(port), HOST: '127.0.0.1', DATABASE_URL: database.databaseUrl })
      assert.equal(failed.status, 1)
      assertOneLine(failed.stderr, /^plantstore: Cannot listen on 127\.0\.0\.1:\d+: the port is already in use/)

      const server = await startServer(t, database)
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
    })

    test('a first start whose stderr goes to /dev/null makes no token no one would see, and says so on stdout; a start that shows stderr makes it', async (t) => {
      const database = await freshDatabase(t, store)
      const unseen = await startServer(t, { databaseUrl: database.databaseUrl, token: 'none', wrapper: ['sh', '-c', 'exec "$@" 2>/dev/null', 'sh'] })
      // Said once it listens, after the look at the store's tokens.
      const warned = (): string[] => unseen.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.level === 40).map(line => line.msg)
      for (const deadline = Date.now() + 5000; warned().length === 0 && Date.now() < deadline;) await new Promise(resolve => setTimeout(resolve, 50))
      assert.deepEqual(warned(), ['stderr goes to /dev/null, where no one would see the first token: none was made (make one with plantstore tokens create, or start once with stderr shown)'])
      assert.equal(cli(database, ['tokens', 'list']).stdout.trim(), '', 'no token')
      unseen.process.kill('SIGTERM')
      assert.equal(await unseen.exited, 0)
      const shown = await startServer(t, database) // reads the token from the banner
      assert.equal((await call(shown, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
    })

    test('the first-start banner names the database: a SQLite file by its absolute path, PostgreSQL without its URL (which may hold a password)', async (t) => {
      const dir = tempDir(t)
      // On PostgreSQL, a URL with a password (the test server trusts every connection, so any will do).
      const withPassword = async (): Promise<string> => {
        const url = new URL((await freshDatabase(t, 'postgres')).databaseUrl)
        url.password = 'canary-pw-7731'
        return url.href
      }
      const server = await startServer(t, store === 'sqlite' ? { dir, cwd: dir, env: { DATABASE_URL: 'plantstore.db' } } : { env: { DATABASE_URL: await withPassword() } })
      const names = store === 'sqlite' ? ` ${join(dir, 'plantstore.db')},` : ' the PostgreSQL database in DATABASE_URL,'
      assert.ok(server.stderr().includes(names), server.stderr())
      assert.doesNotMatch(server.stderr(), /postgres(ql)?:\/\//)
      assert.ok(!(server.stderr() + server.stdout()).includes('canary-pw-7731'), 'the password is in no output')
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
    })

    test('several servers starting together on an empty store create exactly one first token, one of them shows it, and what one stores the others read', async (t) => {
      const database = await freshDatabase(t, store)
      const servers = await Promise.all([1, 2, 3].map(() => startServer(t, { ...database, token: 'not yet known' })))
      const banners = (): string[] => servers.flatMap(server => BANNER_TOKEN.exec(server.stderr())?.[1] ?? [])
      const deadline = Date.now() + 5000
      while (banners().length === 0 && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 20))
      await new Promise(resolve => setTimeout(resolve, 300)) // room for a second banner, if one were coming
      assert.equal(banners().length, 1, servers.map(server => server.stderr()).join('\n'))
      const list = cli(database, ['tokens', 'list']).stdout
      assert.equal(list.trimEnd().split('\n').length, 1, list)
      const [token] = banners()
      for (const [i, server] of servers.entries()) assert.equal((await call(server, 'POST', '/plants', { body: { id: i, name: `p${i}` }, token })).status, 200)
      for (const server of servers) assert.deepEqual((await call(server, 'GET', '/plants', { token })).body.map((p: { id: number }) => p.id), [0, 1, 2])
    })
  })
}

// Configuration and the SQLite file's directory: refused before any store is reached.
test('bad configuration fails at start with one clear line and a non-zero exit', (t) => {
  const dir = tempDir(t)
  const db = join(dir, 'plantstore.db')
  for (const [env, expected] of [
    [{ PORT: 'eighty', DATABASE_URL: db }, /^plantstore: PORT must be a whole number/],
    [{ PORT: '99999', DATABASE_URL: db }, /^plantstore: PORT must be/],
    [{ LOG_LEVEL: 'chatty', DATABASE_URL: db }, /^plantstore: LOG_LEVEL must be one of/],
    [{ RATE_LIMIT_PER_MINUTE: 'lots', DATABASE_URL: db }, /^plantstore: RATE_LIMIT_PER_MINUTE must be/],
    [{ CORS_ORIGINS: 'https://garden.example/', DATABASE_URL: db }, /^plantstore: CORS_ORIGINS must be .*, not "https:\/\/garden.example\/"\.$/m]
  ] as const) {
    const result = startFails({ ...env, PORT: env.PORT })
    assert.notEqual(result.status, 0)
    assert.match(result.stderr, expected)
    assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr)
  }
})

test('an unwritable data directory fails at start with one clear line', { skip: process.getuid?.() === 0 ? 'root can write anywhere: the read-only directory is simulated with a path below a file instead' : false }, (t) => {
  const dir = tempDir(t)
  const locked = join(dir, 'locked')
  mkdirSync(locked)
  chmodSync(locked, 0o500)
  const result = startFails({ PORT: '0', DATABASE_URL: join(locked, 'data', 'plantstore.db') })
  assert.notEqual(result.status, 0)
  assert.match(result.stderr, /^plantstore: Cannot open the database at .*: the directory is not writable/)
})

test('a data directory that cannot be created fails at start with one clear line', (t) => {
  const dir = tempDir(t)
  const file = join(dir, 'a-file')
  writeFileSync(file, '')
  const result = startFails({ PORT: '0', DATABASE_URL: join(file, 'data', 'plantstore.db') })
  assert.notEqual(result.status, 0)
  assert.match(result.stderr, /^plantstore: Cannot open the database at .*: the directory is not writable/)
  assert.equal(result.stderr.trim().split('\n').length, 1, result.stderr)
})

test('a data directory on a filesystem that refuses it (/proc) fails at start with one line, at once', () => {
  const result = startFails({ PORT: '0', DATABASE_URL: '/proc/plantstore-nowhere/data/plantstore.db' })
  assert.equal(result.status, 1, `exit ${result.status} (null: still running after 10 s)`)
  assertOneLine(result.stderr, /^plantstore: Cannot open the database at \/proc\/plantstore-nowhere\/data\/plantstore\.db: /)
})

test('a data path through a symbolic link to nowhere fails at start with one line naming the cause', (t) => {
  const dir = tempDir(t)
  symlinkSync(join(dir, 'nowhere'), join(dir, 'link'))
  const result = startFails({ PORT: '0', DATABASE_URL: join(dir, 'link', 'data', 'plantstore.db') })
  assert.equal(result.status, 1)
  assertOneLine(result.stderr, /^plantstore: Cannot open the database at .*: ENOENT: no such file or directory, mkdir /)
})

test('a PostgreSQL search_path naming no schema that exists fails at start with one line that says what to create', { skip: PG_URL === undefined ? PG_SKIP : false }, () => {
  const url = new URL(PG_URL!)
  url.searchParams.set('options', '-c search_path=no_such_schema_here')
  const failed = startFails({ PORT: '0', DATABASE_URL: url.href })
  assert.equal(failed.status, 1)
  assertOneLine(failed.stderr, /^plantstore: Cannot open the PostgreSQL database in DATABASE_URL: its search_path names no schema that exists; create it first \(CREATE SCHEMA name\)/)
})

test('a start on a host name that does not resolve fails with one line', (t) => {
  const dir = tempDir(t)
  const failed = startFails({ PORT: '0', HOST: 'no-such-host.invalid', DATABASE_URL: join(dir, 'plantstore.db') })
  assert.equal(failed.status, 1)
  assertOneLine(failed.stderr, /^plantstore: Cannot listen on no-such-host\.invalid:0: /)
})

test('a path that holds something other than a SQLite database fails at start with one line, and is left as it was', (t) => {
  const dir = tempDir(t)
  const text = join(dir, 'notes.txt')
  writeFileSync(text, 'not a database\n', { mode: 0o644 })
  chmodSync(text, 0o644)
  // SQLite's header, and nothing a database holds after it.
  const fake = join(dir, 'fake.db')
  writeFileSync(fake, Buffer.concat([Buffer.from('SQLite format 3\0'), Buffer.alloc(4096)]), { mode: 0o644 })
  chmodSync(fake, 0o644)
  const fifo = join(dir, 'pipe')
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
  for (const [path, cause] of [[text, 'file is not a database'], [fake, 'file is not a database'], [fifo, 'it is not a regular file'], [dir, 'it is not a regular file']]) {
    const before = statSync(path)
    const result = startFails({ PORT: '0', DATABASE_URL: path })
    assert.equal(result.status, 1)
    assertOneLine(result.stderr, new RegExp(`^plantstore: Cannot open the database at ${path.replace(/[.]/g, '\\.')}: ${cause}\\.\\n$`))
    assert.equal(statSync(path).mode, before.mode, `${path}: mode changed`)
  }
  assert.equal(readFileSync(text, 'utf8'), 'not a database\n')
  assert.deepEqual(readdirSync(dir).sort(), ['fake.db', 'notes.txt', 'pipe'], 'nothing made beside them (no -journal, -wal, -shm)')
})
