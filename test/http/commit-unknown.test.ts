// A write whose commit outcome is unknown is never answered 200 (SPEC section 10): the
// connection lost while COMMIT is under way (a TCP proxy that cuts it there), and a wait for
// synchronous replication cancelled (PostgreSQL then commits locally, warns, and answers COMMIT
// as if all were well). Each is a 503, and an identical retry tells the truth.
import assert from 'node:assert/strict'
import { connect, createServer, type Socket } from 'node:net'
import { test, type TestContext } from 'node:test'
import { StoreUnavailableError } from '../../src/errors.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { call, cliAsync, isErrorBody, startServer, type Answer, type Server } from '../helpers.js'
import { CLUSTER_SKIP, primaryAlone, waitFor } from '../pg-cluster.js'
import { startTcpProxy } from '../tcp-proxy.js'
import { PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'

/** The simple-protocol message node-postgres sends for COMMIT: 'Q', its length, the text, a NUL. */
const COMMIT = Buffer.concat([Buffer.from('Q'), Buffer.from([0, 0, 0, 11]), Buffer.from('COMMIT\0')])

/**
 * A TCP proxy to the PostgreSQL server of `database` (its `url`: the same database through the
 * proxy) that, once armed, cuts the connection that sends the next COMMIT after
 * a statement holding `marker` (the request's own transaction, not one of the server's own, such as
 * the prune of old webhook deliveries): after passing it on (`after`: the server commits, the answer is lost)
 * or instead of it (`before`: nothing is committed). Or, `silence`, passes it on and from then on
 * forwards nothing on any connection, new ones included, and closes none: a host gone silent.
 */
async function commitCutter (t: TestContext, database: string): Promise<{ url: string, arm: (when: 'before' | 'after' | 'silence', marker: string) => void, cuts: () => number }> {
  const target = new URL(database)
  const upstream = { host: target.hostname, port: Number(target.port === '' ? 5432 : target.port) }
  let armed: { when: 'before' | 'after' | 'silence', marker: Buffer } | undefined
  let cuts = 0
  let silent = false
  const links = new Set<{ client: Socket, server: Socket }>()
  const sockets = new Set<Socket>()
  const server = createServer(client => {
    sockets.add(client)
    client.on('error', () => {})
    if (silent) return // accepted, never answered
    const server = connect(upstream.port, upstream.host)
    links.add({ client, server })
    for (const socket of [client, server]) {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => { sockets.delete(socket); client.destroy(); server.destroy() })
    }
    server.pipe(client)
    let marked = false // this connection's transaction is the one to cut
    client.on('data', (chunk: Buffer) => {
      const arming = armed
      if (arming !== undefined && chunk.includes(arming.marker)) marked = true
      if (silent) return
      if (arming !== undefined && marked && chunk.includes(COMMIT)) {
        armed = undefined
        cuts++
        if (arming.when === 'silence') {
          server.write(chunk)
          silent = true
          for (const link of links) link.server.unpipe(link.client)
          return
        }
        if (arming.when === 'after') server.write(chunk)
        server.unpipe(client) // the answer never arrives
        setTimeout(() => { client.destroy(); server.destroy() }, 200)
        return
      }
      server.write(chunk)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.after(async () => {
    for (const socket of sockets) socket.destroy()
    await new Promise(resolve => server.close(resolve))
  })
  const proxied = new URL(database)
  proxied.host = `127.0.0.1:${(server.address() as { port: number }).port}`
  return { url: proxied.href, arm: (when, marker) => { armed = { when, marker: Buffer.from(marker) } }, cuts: () => cuts }
}

test('PostgreSQL: a tokens create whose COMMIT is cut says its outcome was unknown, finds the token made, unseen, and revokes it', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url } = await pgSchema(t)
  const cutter = await commitCutter(t, url)
  assert.equal((await cliAsync(['migrate'], { DATABASE_URL: url })).status, 0)
  cutter.arm('after', 'cutname')
  const created = await cliAsync(['tokens', 'create', '--name', 'cutname'], { DATABASE_URL: cutter.url })
  assert.equal(cutter.cuts(), 1, 'the COMMIT was cut')
  assert.equal(created.status, 1)
  assert.match(created.stderr, /^plantstore: The store did not confirm the token in time \(.*\); it was made, and token 1 is now revoked, unseen\. Create it again\.\n$/)
  const store = await PostgresStore.open(url)
  t.after(() => store.close())
  const [token] = await store.listTokens()
  assert.equal(token.name, 'cutname')
  assert.ok(token.revokedAt !== undefined, 'made, and revoked')
})

/** The answer once the store has found its host again: a client told 503 + Retry-After tries again. */
async function retried (server: Server, method: string, path: string, body?: unknown): Promise<Answer> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const answer = await call(server, method, path, { body })
    if (answer.status !== 503 || Date.now() > deadline) return answer
    await new Promise(resolve => setTimeout(resolve, 100))
  }
}

test('PostgreSQL: the connection lost while COMMIT is under way is a 503, whether or not it committed; the identical retry answers the truth', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url } = await pgSchema(t)
  const cutter = await commitCutter(t, url)
  const server = await startServer(t, { databaseUrl: cutter.url })

  for (const [when, id] of [['after', 1], ['before', 2]] as const) {
    const body = { id, name: `cut ${when} COMMIT` }
    cutter.arm(when, body.name)
    const first = await call(server, 'POST', '/plants', { body })
    assert.equal(cutter.cuts(), id, 'the COMMIT was cut')
    assert.ok(isErrorBody(first, 503), `${when}: ${first.status} ${first.text}`)
    assert.ok(Number(first.headers.get('retry-after')) >= 1)
    const again = await retried(server, 'POST', '/plants', body)
    assert.equal(again.status, 200, `${when}: the retry: ${again.text}`)
    const read = await call(server, 'GET', `/plants/${id}`)
    assert.deepEqual([read.status, read.body], [200, body])
  }
  const changes = await call(server, 'GET', '/plants/changes')
  assert.deepEqual(changes.body.map((change: { plant: { id: number } }) => change.plant.id), [1, 2], 'each logged once')
})

test('PostgreSQL: a wait for synchronous replication cancelled is a 503, though PostgreSQL committed locally; the identical retry answers 200 only once the standby has the write', { skip: CLUSTER_SKIP ?? false }, async (t) => {
  const primary = await primaryAlone(t)
  const store = await PostgresStore.open(primary.url, { writeTimeoutMs: 10_000 })
  t.after(() => store.close())
  // A synchronous standby that never comes: every commit waits for it, until cancelled. And a
  // server that sends clients no warnings by default: the store asks for them on its connections.
  await primary.query("ALTER SYSTEM SET client_min_messages = 'error'")
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => (await primary.query('SHOW synchronous_standby_names')).rows[0].synchronous_standby_names === 'nobody', 'the setting applies')

  const creating = store.create({ id: 7n, name: 'Fern' })
  creating.catch(() => {})
  await waitFor(async () => (await primary.query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")).rowCount === 1, 'the commit waits for the standby')
  await primary.query("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
  await assert.rejects(creating, (error: Error) => error instanceof StoreUnavailableError && /outcome is unknown.*synchronous replication/.test(error.message))

  assert.deepEqual(await store.get(7n), { plant: { id: 7n, name: 'Fern' }, version: 1n }, 'committed locally all the same')

  // The identical retry finds it stored, and answers so only once the standby has it too: else a
  // promotion of that standby would lose a write answered 200.
  // So does any write that changes nothing: a 404 (a DELETE retried may find its plant gone) or a 412.
  let answered = 0
  const retry = store.create({ id: 7n, name: 'Fern' }).finally(() => { answered++ })
  const missing = store.remove(8n).finally(() => { answered++ })
  const unmet = store.replace(7n, { name: 'Moss' }, { ifMatch: [99n] }).finally(() => { answered++ })
  await waitFor(async () => (await primary.query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")).rowCount === 3, 'the three wait for the standby')
  await new Promise(resolve => setTimeout(resolve, 200))
  assert.equal(answered, 0, 'no answer while the standby lacks what they read')
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = ''")
  await primary.query('SELECT pg_reload_conf()')
  assert.deepEqual(await retry, { outcome: 'same', version: 1n }, 'the retry: the truth, once durable')
  assert.equal(await missing, 'not-found')
  assert.equal(await unmet, 'precondition-failed')
  assert.deepEqual(await store.create({ id: 7n, name: 'Fern' }), { outcome: 'same', version: 1n })
  assert.deepEqual(await store.create({ id: 7n, name: 'Other' }), { outcome: 'conflict', version: 1n })
  assert.deepEqual((await primary.query('SELECT head FROM change_log')).rows, [{ head: '1' }], 'a retry logs nothing')
})

test('PostgreSQL: writes whose COMMIT waits for an absent synchronous standby are answered 503 at their deadline and left waiting, never cancelled: none is seen meanwhile (a cancelled wait commits on the primary alone), each lands once the standby is back; reads are served', { skip: CLUSTER_SKIP ?? false, timeout: 60_000 }, async (t) => {
  const primary = await primaryAlone(t)
  const store = await PostgresStore.open(primary.url) // the default deadline (1.5 s), statement_timeout as long, query_timeout a second after it
  t.after(() => store.close())
  await store.create({ id: 1n, name: 'Fern' })
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => (await primary.query('SHOW synchronous_standby_names')).rows[0].synchronous_standby_names === 'nobody', 'the setting applies')
  const waiting = async (): Promise<number> => (await primary.query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")).rowCount ?? 0

  // A change: answered 503 at its deadline, its outcome unknown, and not seen by anyone while the
  // standby lacks it, well past its statement timeout and query_timeout.
  await assert.rejects(store.create({ id: 2n, name: 'Ivy' }), (error: Error) => error instanceof StoreUnavailableError && error.reason === 'deadline')
  await new Promise(resolve => setTimeout(resolve, 3500))
  assert.equal(await waiting(), 1, 'its COMMIT still waits for the standby')
  assert.equal(await store.get(2n), undefined, 'a read does not see it')
  assert.deepEqual((await primary.query('SELECT head FROM change_log')).rows, [{ head: '1' }], 'nor does the log')
  // Writes that change nothing (404s) still commit a record the standby must have: each waits too,
  // within the writes' share of the pool (8 of 10), and reads are served meanwhile.
  const removing = Promise.allSettled(Array.from({ length: 20 }, (_, n) => store.remove(BigInt(100 + n))))
  await waitFor(async () => await waiting() >= 8, 'the writes\' share of the pool waits for the standby')
  assert.deepEqual(await store.get(1n), { plant: { id: 1n, name: 'Fern' }, version: 1n }, 'a read is served while the writes wait')
  const outcomes = await removing
  assert.ok(outcomes.every(outcome => outcome.status === 'rejected' && outcome.reason instanceof StoreUnavailableError), 'each answered 503 at its deadline')
  assert.equal(await waiting(), 8, 'none cancelled, none more than the share')

  // The standby is back (here: none is asked for): the waiting commits end; the change lands, once.
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = ''")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => await waiting() === 0, 'the commits end', 10_000)
  assert.deepEqual(await store.get(2n), { plant: { id: 2n, name: 'Ivy' }, version: 2n })
  assert.deepEqual(await store.create({ id: 2n, name: 'Ivy' }), { outcome: 'same', version: 2n }, 'the identical retry tells the truth')
  assert.equal((await store.create({ id: 3n, name: 'Moss' })).outcome, 'created', 'writes go on')
})

test('PostgreSQL: an autocommit write of the service\'s own bookkeeping (the rate limit\'s counts) waiting for an absent synchronous standby is cancelled once given up on: no session is left waiting, holding a connection slot', { skip: CLUSTER_SKIP ?? false, timeout: 60_000 }, async (t) => {
  const primary = await primaryAlone(t)
  const store = await PostgresStore.open(primary.url)
  t.after(() => store.close())
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => (await primary.query('SHOW synchronous_standby_names')).rows[0].synchronous_standby_names === 'nobody', 'the setting applies')
  const waiting = async (): Promise<number> => (await primary.query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'")).rowCount ?? 0
  const window = Math.floor(Date.now() / 60_000) * 60_000
  const syncs = Array.from({ length: 3 }, (_, n) => store.rateWindows.sync(`instance-${n}`, window, window - 60_000, new Map([[n + 1, 1]])))
  for (const sync of syncs) await assert.rejects(sync, StoreUnavailableError)
  await waitFor(async () => await waiting() === 0, 'no session left waiting for the standby', 10_000)
})

test('PostgreSQL, several hosts: a COMMIT waiting for an absent synchronous standby starts no look for another host; a statement that gets no answer in time (the host silent) does, and operations are served while it runs', { skip: CLUSTER_SKIP ?? false, timeout: 60_000 }, async (t) => {
  const primary = await primaryAlone(t)
  // The first host is the primary through a proxy that can go silent; the second, the primary itself.
  const first = await startTcpProxy(t, { host: '127.0.0.1', port: primary.port })
  const store = await PostgresStore.open(`postgres://postgres@127.0.0.1:${first.port},127.0.0.1:${primary.port}/postgres?target_session_attrs=primary`)
  t.after(() => store.close())
  const searches: string[] = []
  store.onSearch = event => searches.push(Object.keys(event)[0])
  await store.create({ id: 1n, name: 'Fern' })
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => (await primary.query('SHOW synchronous_standby_names')).rows[0].synchronous_standby_names === 'nobody', 'the setting applies')

  await assert.rejects(store.remove(2n), StoreUnavailableError)
  await new Promise(resolve => setTimeout(resolve, 3000)) // past query_timeout
  assert.deepEqual(searches, [], 'a commit that waits is no host lost')
  assert.deepEqual(await store.get(1n), { plant: { id: 1n, name: 'Fern' }, version: 1n })

  // The first host goes silent: a read gets no answer in time, and the look it starts lets
  // operations go on meanwhile (told as slow, not lost).
  first.blackhole()
  await assert.rejects(store.get(1n), StoreUnavailableError)
  await waitFor(async () => searches.length > 0, 'a look for the host, once a read outlives query_timeout', 10_000)
  assert.deepEqual(searches, ['slow'], 'told as slow, not lost; the look still runs')
  await waitFor(async () => searches.length === 2, 'the look ends', 10_000)
  assert.deepEqual(searches, ['slow', 'found'])
  assert.deepEqual(await store.get(1n), { plant: { id: 1n, name: 'Fern' }, version: 1n }, 'served from the second host')
})

test('PostgreSQL, several hosts: a COMMIT whose host goes silent under it holds its write slot only until a reply timeout after the store has moved to the other host', { skip: PG_URL === undefined ? PG_SKIP : false, timeout: 60_000 }, async (t) => {
  const { url } = await pgSchema(t)
  const cutter = await commitCutter(t, url)
  const target = new URL(url)
  // The first host is the database through the proxy, the second the database itself.
  const store = await PostgresStore.open(`${url.replace(target.host, `${new URL(cutter.url).host},${target.host}`)}&target_session_attrs=read-write`, { poolSize: 3 }) // one connection for writes
  t.after(() => store.close())
  const searches: string[] = []
  store.onSearch = event => searches.push(Object.keys(event)[0])
  cutter.arm('silence', 'Fern')
  await assert.rejects(store.create({ id: 1n, name: 'Fern' }), StoreUnavailableError) // its COMMIT sent, never answered
  // The first host is silent now: a read gets no answer in time, and the store moves to the second.
  await assert.rejects(store.get(1n), StoreUnavailableError)
  await waitFor(async () => searches.includes('found'), 'the store moves to the second host', 15_000)
  // The one write slot is the silent COMMIT's until it is cut: then writes are served again.
  await waitFor(async () => await store.create({ id: 2n, name: 'Ivy' }).then(() => true, () => false), 'a write is served on the second host', 15_000)
  assert.deepEqual(await store.get(1n), { plant: { id: 1n, name: 'Fern' }, version: 1n }, 'the silent COMMIT had committed')
})

test('PostgreSQL, a synchronous standby away: a server starts on a store that has tokens, and serves reads and /readyz, while writes wait', { skip: CLUSTER_SKIP ?? false }, async (t) => {
  const primary = await primaryAlone(t)
  const first = await startServer(t, { databaseUrl: primary.url }) // makes the first token
  first.process.kill('SIGTERM')
  assert.equal(await first.exited, 0)
  await primary.query("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
  await primary.query('SELECT pg_reload_conf()')
  await waitFor(async () => (await primary.query('SHOW synchronous_standby_names')).rows[0].synchronous_standby_names === 'nobody', 'the setting applies')

  // The rate limit on: its counts are shared through the database, by a write that waits too.
  const server = await startServer(t, { databaseUrl: primary.url, token: first.token, env: { RATE_LIMIT_PER_MINUTE: '60000', SHUTDOWN_TIMEOUT: '3' } })
  await new Promise(resolve => setTimeout(resolve, 2500)) // past the deadline of a write made at the start
  assert.equal(server.process.exitCode, null, `the server is still running: ${server.stderr()}`)
  assert.equal((await call(server, 'GET', '/readyz')).status, 200)
  const timed = async (method: string, path: string, body?: unknown): Promise<[number, number]> => {
    const started = performance.now()
    const answer = await call(server, method, path, { body })
    return [answer.status, performance.now() - started]
  }
  // The token's first requests here: the rate limit's first sync of it waits for the standby.
  const [read, post] = await Promise.all([timed('GET', '/plants/1'), timed('POST', '/plants', { id: 1, name: 'Fern' })])
  assert.equal(read[0], 404)
  assert.ok(read[1] < 1000, `the read answered in ${read[1].toFixed(0)} ms`)
  assert.equal(post[0], 503, 'a write waits for the standby, and is answered 503 at its deadline')
  assert.ok(post[1] < 2000, `the write answered in ${post[1].toFixed(0)} ms`)
  // Its COMMIT still waits (never cancelled): a stop closes its connection under it, in time.
  const signalled = performance.now()
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  const took = performance.now() - signalled
  assert.ok(took < 3000, `stopped ${took.toFixed(0)} ms after SIGTERM (SHUTDOWN_TIMEOUT 3 s)`)
})
