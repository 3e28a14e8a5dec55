// A running server losing its PostgreSQL database: the connection is cut by a proxy the test
// controls (reset, or a blackhole that answers nothing), never by stopping the shared server.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import { test, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { call, cli, isErrorBody, startServer, tempDir, type Answer, type Server } from '../helpers.js'
import { queryOnce } from '../../scripts/postgres-query.js'
import { adminQuery, PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'
import { startTcpProxy, type TcpProxy } from '../tcp-proxy.js'

/** Every answer during an outage leaves within this, measured by the client. */
const ANSWER_WITHIN_MS = 2000

interface Outage { server: Server, proxy: TcpProxy, schema: string, url: string }

/** A server whose DATABASE_URL goes through a proxy; `url` reaches the same schema directly. */
async function outageServer (t: TestContext, env: NodeJS.ProcessEnv = {}): Promise<Outage> {
  const { url, schema } = await pgSchema(t)
  const direct = new URL(url)
  const proxy = await startTcpProxy(t, { host: direct.hostname, port: Number(direct.port === '' ? 5432 : direct.port) })
  const proxied = new URL(url)
  proxied.hostname = '127.0.0.1'
  proxied.port = String(proxy.port)
  const server = await startServer(t, { env: { ...env, DATABASE_URL: proxied.href } })
  return { server, proxy, schema, url }
}

/** One request and how long its answer took, in ms. */
async function timed (server: Server, method: string, path: string, options: Parameters<typeof call>[3] = {}): Promise<Answer & { ms: number, what: string }> {
  const started = performance.now()
  const answer = await call(server, method, path, options)
  return { ...answer, ms: performance.now() - started, what: `${method} ${path}` }
}

/** Nothing on stderr but the first start's banner: no stack trace, no unhandled rejection. */
function assertQuietStderr (server: Server): void {
  assert.equal(server.stderr().replace(/^={78}\n[\s\S]*?\n={78}\n/, ''), '', 'stderr holds only the banner')
  const severe = server.stdout().split('\n').filter(line => /"level":(50|60)/.test(line))
  assert.deepEqual(severe, [], 'no error or fatal log line')
}

/** The test server's superuser URL, in database `database`. */
function superuserUrl (database: string): string {
  const url = new URL(PG_URL!)
  url.pathname = `/${database}`
  return url.href
}

/** Polls until `check` holds, every 100 ms, for at most `ms`; returns how long it took. */
async function within (ms: number, check: () => Promise<boolean>): Promise<number> {
  const started = Date.now()
  while (!(await check())) {
    assert.ok(Date.now() - started < ms, `not within ${ms} ms`)
    await sleep(100)
  }
  return Date.now() - started
}

if (PG_URL === undefined) {
  test('a server losing its PostgreSQL database', { skip: PG_SKIP }, () => {})
} else {
  for (const cut of ['reset', 'blackhole'] as const) {
    test(`database cut (${cut}): every route answers 503 with Retry-After and the Error body within 2 s, /healthz stays 200, and the server recovers by itself`, async (t) => {
      const { server, proxy, url } = await outageServer(t)
      const made = cli(tempDir(t), ['tokens', 'create', '--name', 'fresh'], { DATABASE_URL: url })
      assert.equal(made.status, 0, made.stderr)
      const freshToken = made.stdout.trim()
      for (const id of [1, 2]) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })).status, 200)
      // Just used, so the server's token is in its one-second cache; the fresh one must be looked up.
      assert.equal((await call(server, 'GET', '/plants/1')).status, 200)
      proxy[cut]()
      const answers = await Promise.all([
        ...[server.token, freshToken].flatMap(token => [
          timed(server, 'POST', '/plants', { body: { id: 3, name: 'Ivy' }, token }),
          timed(server, 'GET', '/plants/1', { token }),
          timed(server, 'GET', '/plants?limit=5', { token }),
          timed(server, 'PUT', '/plants/1', { body: { name: 'Moss' }, token }),
          timed(server, 'DELETE', '/plants/2', { token })
        ]),
        timed(server, 'GET', '/readyz', { token: null })
      ])
      for (const answer of answers) {
        assert.ok(isErrorBody(answer, 503), `${answer.what}: ${answer.status} ${answer.text}`)
        assert.equal(answer.headers.get('retry-after'), '1', answer.what)
        assert.ok(answer.ms < ANSWER_WITHIN_MS, `${answer.what} answered after ${Math.round(answer.ms)} ms`)
      }
      t.diagnostic(`${cut}: slowest answer ${Math.round(Math.max(...answers.map(a => a.ms)))} ms`)
      const health = await timed(server, 'GET', '/healthz', { token: null })
      assert.equal(health.status, 200)
      assert.ok(health.ms < 500, `/healthz took ${Math.round(health.ms)} ms`)
      // A second round, on whatever the pool holds after the first: still bounded.
      const again = await timed(server, 'GET', '/plants/1', { token: freshToken })
      assert.ok(isErrorBody(again, 503) && again.ms < ANSWER_WITHIN_MS, `${again.status} after ${Math.round(again.ms)} ms`)

      proxy.restore()
      const took = await within(5000, async () => (await call(server, 'GET', '/readyz', { token: null })).status === 200)
      t.diagnostic(`${cut}: ready again ${took} ms after the restore`)
      for (const token of [server.token, freshToken]) {
        assert.equal((await call(server, 'GET', '/plants/1', { token })).status, 200)
      }
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 4, name: 'Fern' } })).status, 200)
      assert.equal(server.process.exitCode, null, 'the same process, never restarted')
      assertQuietStderr(server)
    })

    test(`database cut (${cut}): SIGTERM still stops the server within SHUTDOWN_TIMEOUT, exit 0`, async (t) => {
      const { server, proxy } = await outageServer(t, { SHUTDOWN_TIMEOUT: '3' })
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
      proxy[cut]()
      const inFlight = timed(server, 'PUT', '/plants/1', { body: { name: 'Moss' } })
      await sleep(200)
      const signalled = Date.now()
      server.process.kill('SIGTERM')
      const answer = await inFlight
      assert.ok(isErrorBody(answer, 503) && answer.ms < ANSWER_WITHIN_MS, `${answer.status} after ${Math.round(answer.ms)} ms`)
      assert.equal(await server.exited, 0)
      assert.ok(Date.now() - signalled < 3500, `exited ${Date.now() - signalled} ms after SIGTERM`)
      assertQuietStderr(server)
    })

    test(`database cut (${cut}) under a stream of POSTs: every POST answered 200 is in the database afterwards`, async (t) => {
      const { server, proxy, schema } = await outageServer(t)
      const answered: Array<{ id: number, status: number, ms: number }> = []
      const stop = new AbortController()
      const writer = async (first: number): Promise<void> => {
        for (let id = first; !stop.signal.aborted; id++) {
          const answer = await timed(server, 'POST', '/plants', { body: { id, name: `n${id}` } })
          answered.push({ id, status: answer.status, ms: answer.ms })
          if (answer.status !== 200) await sleep(50) // a client backing off a little
        }
      }
      const writers = Array.from({ length: 4 }, (_, i) => writer(i * 1_000_000))
      await sleep(500)
      proxy[cut]()
      await sleep(2500)
      proxy.restore()
      await sleep(3000)
      stop.abort()
      await Promise.all(writers)

      const statuses = new Set(answered.map(a => a.status))
      assert.deepEqual([...statuses].filter(s => s !== 200 && s !== 503), [], 'only 200 or 503')
      const slowest = Math.max(...answered.map(a => a.ms))
      assert.ok(slowest < ANSWER_WITHIN_MS, `a POST answered after ${Math.round(slowest)} ms`)
      const refused = answered.filter(a => a.status === 503)
      assert.ok(refused.length > 0, 'the cut was felt')
      assert.equal(answered.at(-1)?.status, 200, 'writes go through again after the restore')

      const { rows } = await adminQuery(`SELECT id::text, name FROM ${schema}.plants`)
      const stored = new Map(rows.map(row => [Number(row.id), row.name]))
      const lost = answered.filter(a => a.status === 200 && stored.get(a.id) !== `n${a.id}`)
      assert.deepEqual(lost, [], 'no POST answered 200 is missing')
      const keptAnyway = refused.filter(a => stored.has(a.id)).length
      t.diagnostic(`${cut}: ${answered.length} POSTs, ${refused.length} answered 503 (${keptAnyway} of them stored all the same), slowest ${Math.round(slowest)} ms`)
      assertQuietStderr(server)
    })
  }

  test('a database that refuses the service (its role may not log in, it takes no connections or no writes, a privilege revoked): 503 with Retry-After, /readyz too, never 500, and the server recovers by itself', async (t) => {
    const name = `refusing_${randomBytes(4).toString('hex')}`
    await adminQuery(`CREATE ROLE ${name} LOGIN`)
    await adminQuery(`CREATE DATABASE ${name} OWNER ${name}`)
    const endSessions = async (): Promise<void> => { await adminQuery('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1', [name]) }
    t.after(async () => {
      await adminQuery(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`)
      await endSessions()
      await adminQuery(`DROP DATABASE IF EXISTS ${name}`)
      await adminQuery(`DROP ROLE IF EXISTS ${name}`)
    })
    const url = new URL(PG_URL!)
    url.username = name
    url.pathname = `/${name}`
    const server = await startServer(t, { env: { DATABASE_URL: url.href } })
    assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
    let next = 2
    const refusals: Array<[string, string, string]> = [
      ['its role may not log in (28000)', `ALTER ROLE ${name} NOLOGIN`, `ALTER ROLE ${name} LOGIN`],
      ['it takes no connections (55000)', `ALTER DATABASE ${name} ALLOW_CONNECTIONS false`, `ALTER DATABASE ${name} ALLOW_CONNECTIONS true`],
      ['a privilege revoked (42501)', `REVOKE INSERT ON ${name}.public.plants FROM ${name}`, `GRANT INSERT ON ${name}.public.plants TO ${name}`],
      // Every session read-only, as on a standby or a primary made read-only: not ready either (SPEC section 10).
      ['it takes no writes (25006)', `ALTER DATABASE ${name} SET default_transaction_read_only = on`, `ALTER DATABASE ${name} RESET default_transaction_read_only`]
    ]
    for (const [why, refuse, undo] of refusals) {
      // REVOKE and GRANT name the table of the other database: run them there, as its owner's superuser.
      const run = async (sql: string): Promise<void> => { await (sql.includes('.public.') ? queryOnce(superuserUrl(name), sql.replace(`${name}.public.`, 'public.')) : adminQuery(sql)) }
      await run(refuse)
      await endSessions()
      const answers = await Promise.all([
        timed(server, 'POST', '/plants', { body: { id: next, name: 'Ivy' } }),
        // A read goes on where only writes are refused; readiness means writes can succeed.
        ...(why.includes('42501') || why.includes('25006') ? [] : [timed(server, 'GET', '/plants/1')]),
        ...(why.includes('42501') ? [] : [timed(server, 'GET', '/readyz', { token: null })])
      ])
      for (const answer of answers) {
        assert.ok(isErrorBody(answer, 503), `${why}, ${answer.what}: ${answer.status} ${answer.text}`)
        assert.equal(answer.headers.get('retry-after'), '1', `${why}, ${answer.what}`)
      }
      await run(undo)
      await endSessions()
      await within(5000, async () => (await call(server, 'POST', '/plants', { body: { id: next, name: 'Ivy' } })).status === 200)
      next++
    }
    assert.equal((await call(server, 'GET', '/readyz', { token: null })).status, 200)
    assert.equal(server.process.exitCode, null, 'the same process, never restarted')
    assert.deepEqual(server.stdout().split('\n').filter(line => /"level":(50|60)/.test(line)), [], 'no error log line: no 500')
  })
}
