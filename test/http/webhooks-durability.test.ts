// Webhooks lose nothing and invent nothing (SPEC section 5): a receiver down while thousands of
// writes are acknowledged and the server SIGKILLed gets every change afterwards, each under one
// webhook-id; a write answered 503 or refused delivers nothing; on PostgreSQL two instances
// share the work, each delivery attempted by one at a time, and a killed one's lease expires.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { call, freshDatabase, holdWriteLock, startServer, testStores, twoInstances, type Server } from '../helpers.js'
import { startReceiver, type Received } from '../receiver.js'
import { pgSchema, PG_SKIP, PG_URL } from '../store/postgres-helpers.js'

/** Thousands of writes on SQLite; on PostgreSQL, whose plant writes commit one at a time (the change log's head), a thousand keeps the suite short. */
const WRITES = { sqlite: 2000, postgres: 1000 }
const WRITERS = 32
const PRIVATE = { WEBHOOKS_ALLOW_PRIVATE: 'true' }

/**
 * POSTs plants `first`, `first + 1`, … `count` in all from WRITERS loops over the servers in turn,
 * each retried after a 503 as clients are told to (the same plant again is a safe retry); returns
 * the ids answered 200.
 */
async function writeMany (servers: Server[], first: number, count: number): Promise<number[]> {
  const acknowledged: number[] = []
  let next = first
  await Promise.all(Array.from({ length: WRITERS }, async (_, writer) => {
    while (next < first + count) {
      const id = next++
      for (let attempt = 1; attempt <= 10; attempt++) {
        const answer = await call(servers[writer % servers.length], 'POST', '/plants', { body: { id, name: `plant ${id}` } })
        if (answer.status === 200) acknowledged.push(id)
        if (answer.status !== 503) break
        await sleep(100)
      }
    }
  }))
  return acknowledged
}

/** The received requests that carry plant `id`'s creation, by webhook-id. */
function byWebhookId (received: Received[]): Map<string, Received[]> {
  const map = new Map<string, Received[]>()
  for (const request of received) map.set(String(request.headers['webhook-id']), [...map.get(String(request.headers['webhook-id'])) ?? [], request])
  return map
}

async function subscribe (server: Server, url: string): Promise<number> {
  const answer = await call(server, 'POST', '/webhooks', { body: { url } })
  assert.equal(answer.status, 201, answer.text)
  return answer.body.id
}

/** Waits until the receiver has a 2xx'd request for each of `count` distinct webhook-ids, or fails after `ms`. */
async function deliveredAll (received: Received[], delivered: Set<string>, count: number, ms: number): Promise<void> {
  const deadline = Date.now() + ms
  while (delivered.size < count) {
    if (Date.now() > deadline) throw new Error(`${delivered.size} of ${count} changes delivered within ${ms} ms (${received.length} requests)`)
    await sleep(50)
  }
}

for (const kind of testStores()) {
  describe(`${kind}: webhooks lose nothing`, () => {
    test(`a receiver that does not answer while ${WRITES[kind]} writes are acknowledged and the server is SIGKILLed: every change is delivered afterwards, under one webhook-id each`, async (t) => {
      const database = await freshDatabase(t, kind)
      const env = { ...PRIVATE, WEBHOOKS_TIMEOUT: '3' } // a lease of 3 + 5 s
      const receiver = await startReceiver(t)
      receiver.answer = () => {} // down behind a live address: attempts hang until the timeout
      const server = await startServer(t, { ...database, env })
      await subscribe(server, `${receiver.url}/hook`)
      const acknowledged = await writeMany([server], 1, WRITES[kind])
      assert.equal(acknowledged.length, WRITES[kind])
      server.process.kill('SIGKILL')
      await server.exited
      const attemptedBefore = receiver.received.length
      assert.ok(attemptedBefore > 0, 'attempts were under way when the server died')

      const delivered = new Set<string>()
      receiver.answer = (request, response) => {
        delivered.add(String(request.headers['webhook-id']))
        response.writeHead(204).end()
      }
      await startServer(t, { ...database, token: server.token, env })
      await deliveredAll(receiver.received, delivered, WRITES[kind], 60_000)

      const ids = byWebhookId(receiver.received)
      assert.equal(ids.size, WRITES[kind], 'one webhook-id per change, never a new one for another attempt')
      const names = new Set<string>()
      let again = 0
      for (const [id, requests] of ids) {
        if (requests.length > 1) again++
        assert.equal(new Set(requests.map(r => r.body)).size, 1, `${id}: the same body on every attempt`)
        assert.equal(new Set(requests.map(r => r.headers['webhook-position'])).size, 1)
        names.add(JSON.parse(requests[0].body).name)
      }
      assert.ok(again > 0, 'the attempts cut off by the kill were made again, under their webhook-id')
      assert.deepEqual([...names].sort(), acknowledged.map(id => `plant ${id}`).sort(), 'exactly the acknowledged plants')
    })

    for (const shutdownTimeout of ['10', '1']) {
      test(`an attempt still waiting for its receiver when the server is stopped is recorded as abandoned and made again at once on the next start, not after its lease (SHUTDOWN_TIMEOUT=${shutdownTimeout}: exit 0 within it)`, async (t) => {
        const database = await freshDatabase(t, kind)
        const receiver = await startReceiver(t)
        receiver.answer = () => {} // takes the request and never answers: the attempt waits (15 s, a lease of 20)
        const server = await startServer(t, { ...database, env: { ...PRIVATE, SHUTDOWN_TIMEOUT: shutdownTimeout } })
        const id = await subscribe(server, `${receiver.url}/hook`)
        assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
        await receiver.waitFor(1, 5000)
        const stopped = Date.now()
        server.process.kill('SIGTERM')
        assert.equal(await server.exited, 0, server.stdout().slice(-500))
        assert.ok(Date.now() - stopped < Number(shutdownTimeout) * 1000, `stopped in ${Date.now() - stopped} ms`)

        receiver.answer = (_request, response) => { response.writeHead(204).end() }
        const restarted = await startServer(t, { ...database, token: server.token, env: PRIVATE })
        const started = Date.now()
        await receiver.waitFor(2, 5000)
        assert.ok(Date.now() - started < 3000, `made again ${Date.now() - started} ms after the start`)
        assert.equal(receiver.received[1].headers['webhook-id'], receiver.received[0].headers['webhook-id'])
        let deliveries: any[] = []
        for (const until = Date.now() + 5000; Date.now() < until; await sleep(100)) {
          deliveries = (await call(restarted, 'GET', `/webhooks/${id}/deliveries`)).body
          if (deliveries[0]?.status === 'delivered') break
        }
        assert.equal(deliveries.length, 1)
        assert.equal(deliveries[0].status, 'delivered')
        assert.deepEqual(deliveries[0].attempts.map((attempt: { error?: string, statusCode?: number }) => attempt.error ?? attempt.statusCode), ['abandoned: the server was stopping', 204])
      })
    }

    if (kind === 'sqlite') {
      test('deliveries a SIGKILLed server held leases on, and those due behind them, are attempted at once on the next start, not once the leases run out: only one process serves SQLite, so every lease held at a start was left by a dead one', async (t) => {
        const database = await freshDatabase(t, kind)
        const receiver = await startReceiver(t)
        receiver.answer = () => {} // takes the request and never answers: each attempt waits (15 s, a lease of 20)
        const server = await startServer(t, { ...database, env: PRIVATE })
        await subscribe(server, `${receiver.url}/hook`)
        const places = 16 // a subscription's attempts at once: a quarter of WEBHOOKS_MAX_IN_FLIGHT (64)
        const plants = places + 4
        for (let id = 1; id <= plants; id++) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `plant ${id}` } })).status, 200)
        await receiver.waitFor(places, 5000)
        await sleep(300)
        assert.equal(receiver.received.length, places, 'the rest wait behind the leased')
        server.process.kill('SIGKILL')
        await server.exited

        const delivered = new Set<string>()
        receiver.answer = (request, response) => {
          delivered.add(String(request.headers['webhook-id']))
          response.writeHead(204).end()
        }
        await startServer(t, { ...database, token: server.token, env: PRIVATE })
        const started = Date.now()
        await deliveredAll(receiver.received, delivered, plants, 15_000)
        assert.ok(Date.now() - started < 3000, `all delivered ${Date.now() - started} ms after the start`)
      })
    }

    test('a write refused (503, 409) or repeated delivers nothing', async (t) => {
      const server = await startServer(t, { store: kind, env: PRIVATE })
      const receiver = await startReceiver(t)
      await subscribe(server, receiver.url)
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200, 'an identical retry')
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Moss' } })).status, 409)
      assert.equal((await call(server, 'PUT', '/plants/2', { body: { name: 'none' } })).status, 404)
      assert.equal((await call(server, 'PUT', '/plants/1', { body: { name: 'Fern' }, headers: { 'if-match': '"99"' } })).status, 412)
      if (kind === 'sqlite') {
        const { released } = await holdWriteLock(t, server.dbPath, 2500)
        const refused = await call(server, 'POST', '/plants', { body: { id: 3, name: 'Ivy' } })
        assert.equal(refused.status, 503, refused.text)
        await released
        assert.equal((await call(server, 'GET', '/plants/3')).status, 404, 'a 503 stored nothing')
      }
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 4, name: 'Sage' } })).status, 200)
      await receiver.waitFor(2, 5000)
      await sleep(1000)
      assert.deepEqual(receiver.received.map(r => JSON.parse(r.body).name).sort(), ['Fern', 'Sage'], 'one delivery per committed change, none else')
    })
  })
}

if (PG_URL === undefined) {
  test('webhooks with several instances on PostgreSQL', { skip: PG_SKIP }, () => {})
} else {
  test(`two instances share the deliveries of ${WRITES.postgres} writes: each change attempted once, by one of them`, async (t) => {
    const { servers } = await twoInstances(t, PRIVATE)
    const receiver = await startReceiver(t)
    const delivered = new Set<string>()
    receiver.answer = (request, response) => {
      delivered.add(String(request.headers['webhook-id']))
      response.writeHead(204).end()
    }
    await subscribe(servers[0], receiver.url)
    const acknowledged = await writeMany(servers, 1, WRITES.postgres)
    assert.equal(acknowledged.length, WRITES.postgres)
    await deliveredAll(receiver.received, delivered, WRITES.postgres, 60_000)
    await sleep(500)
    const twice = [...byWebhookId(receiver.received)].filter(([, requests]) => requests.length > 1)
    assert.deepEqual(twice.map(([id]) => id), [], 'no change attempted by both instances (every receiver answered at once)')
  })

  test('an instance killed mid-attempt leaves its delivery to the other, once its lease has run out, and not before', async (t) => {
    const { url } = await pgSchema(t)
    const env = { ...PRIVATE, DATABASE_URL: url, WEBHOOKS_TIMEOUT: '2' } // a lease of 2 + 5 s
    const a = await startServer(t, { env })
    const receiver = await startReceiver(t)
    receiver.answer = () => {} // holds the attempt: it is under way when its sender dies
    await subscribe(a, receiver.url)
    assert.equal((await call(a, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
    const [first] = await receiver.waitFor(1, 5000) // from `a`, the only instance yet
    await startServer(t, { env, token: a.token })
    receiver.answer = (_request, response) => { response.writeHead(204).end() }
    a.process.kill('SIGKILL')
    const [, second] = await receiver.waitFor(2, 20_000)
    assert.equal(second.headers['webhook-id'], first.headers['webhook-id'])
    assert.ok(second.at - first.at >= 6500, `the other waited for the lease: ${second.at - first.at} ms`)
    await sleep(500)
    assert.equal(receiver.received.length, 2, 'attempted by one at a time')
  })
}
