// Webhooks black box over real HTTP (SPEC section 5), on both stores: the subscription routes,
// real deliveries verified with the Standard Webhooks library, the delivery log, retry, replay,
// and the SSRF refusals at registration.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { Webhook } from 'standardwebhooks'
import { call, cli, isErrorBody, parseExact, parseMetrics, sampleValue, startServer, testStores, type Server } from '../helpers.js'
import { startReceiver, type Received } from '../receiver.js'
import { sqlOnce } from '../stored.js'

const BIG = '9223372036854775807'
const DAY = 86_400_000

/** The headers Standard Webhooks' verify reads, from a received request. */
const headersOf = (received: Received): Record<string, string> => Object.fromEntries(Object.entries(received.headers).map(([name, value]) => [name, String(value)]))

async function subscribe (server: Server, body: unknown): Promise<{ id: number, secret: string }> {
  const answer = await call(server, 'POST', '/webhooks', { body })
  assert.equal(answer.status, 201, answer.text)
  return answer.body
}

/** A fresh POST of raw JSON text, so that ids beyond 2^53 are sent exactly. */
async function post (server: Server, raw: string): Promise<void> {
  const answer = await call(server, 'POST', '/plants', { raw })
  assert.equal(answer.status, 200, answer.text)
}

for (const kind of testStores()) {
  describe(`${kind}: webhooks`, () => {
    test('subscriptions: create shows the secret once; list and read never; delete; 404s; admin only', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const created = await call(server, 'POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/hook', events: ['plant.created', 'plant.deleted'], tag: 'shade' } })
      assert.equal(created.status, 201, created.text)
      const { id, secret, createdAt, ...rest } = created.body
      assert.match(secret, /^whsec_[A-Za-z0-9+/]+={0,2}$/)
      assert.ok(Buffer.from(secret.slice(6), 'base64').length >= 24, 'at least 24 random bytes')
      assert.ok(Number.isInteger(id) && id > 0)
      assert.equal(created.headers.get('location'), `/webhooks/${id}`, 'a 201 names what it made (RFC 9110 15.3.2)')
      assert.equal((await call(server, 'GET', created.headers.get('location')!)).body.id, id)
      assert.ok(!Number.isNaN(Date.parse(createdAt)))
      assert.deepEqual(rest, { url: 'http://127.0.0.1:9/hook', events: ['plant.created', 'plant.deleted'], tag: 'shade', enabled: true })
      const byDefault = await subscribe(server, { url: 'http://127.0.0.1:9/other' })
      assert.notEqual(byDefault.secret, secret)

      const list = await call(server, 'GET', '/webhooks')
      assert.equal(list.status, 200)
      assert.deepEqual(list.body.map((w: { id: number, events: string[] }) => [w.id, w.events]), [[id, ['plant.created', 'plant.deleted']], [byDefault.id, ['plant.created']]])
      assert.ok(!list.text.includes('whsec_'), 'never a secret in a list')
      const one = await call(server, 'GET', `/webhooks/${id}`)
      assert.equal(one.status, 200)
      assert.ok(!one.text.includes('whsec_'))
      assert.equal(one.body.url, 'http://127.0.0.1:9/hook')

      for (const body of [{}, { url: 'http://127.0.0.1:9/', event: ['plant.created'] }, { url: 'http://127.0.0.1:9/', events: [] }, { url: 'http://127.0.0.1:9/', events: ['plant.eaten'] },
        { url: 'http://127.0.0.1:9/', events: ['plant.created', 'plant.created'] }, { url: 'ftp://example.com/' }, { url: 'http://user:pw@127.0.0.1:9/' }, { url: 'not a url' }, { url: 'http://127.0.0.1:9/', tag: '' },
        { url: 'http://127.0.0.1:9/a\u0000b' }, { url: 'http://127.0.0.1:9/a b' }, { url: 'http://127.0.0.1:9/\u007f' }, { url: ' http://127.0.0.1:9/' }, { url: 'http:127.0.0.1:9/' }, { url: 'http://127.0.0.1:9\\@evil.example/' }]) {
        assert.ok(isErrorBody(await call(server, 'POST', '/webhooks', { body }), 400), JSON.stringify(body))
      }
      const eaten = await call(server, 'POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/', events: ['plant.eaten'] } })
      assert.equal(eaten.body.message, '`events.0` in the request body must be one of "plant.created", "plant.updated", "plant.deleted".', 'names the values it takes')
      // A tag holds what a plant's tag can hold: U+0000 too, except on PostgreSQL, whose text cannot.
      const nul = await call(server, 'POST', '/webhooks', { body: { url: 'http://127.0.0.1:9/', tag: 'a\u0000b' } })
      if (kind === 'postgres') assert.ok(isErrorBody(nul, 400), nul.text)
      else assert.equal(nul.status, 201, nul.text)
      for (const [method, path] of [['GET', '/webhooks/999'], ['DELETE', '/webhooks/999'], ['POST', '/webhooks/999/rotate-secret'], ['POST', '/webhooks/999/enable'], ['GET', '/webhooks/999/deliveries'], ['POST', '/webhooks/999/deliveries/1/retry']]) {
        assert.ok(isErrorBody(await call(server, method, path), 404), `${method} ${path}`)
        // An operation that takes no body, sent an empty one that is named JSON (as some clients always do): as if sent none.
        if (method === 'POST') assert.ok(isErrorBody(await call(server, method, path, { raw: '', headers: { 'content-type': 'application/json' } }), 404), `${method} ${path} with an empty JSON body`)
      }
      assert.ok(isErrorBody(await call(server, 'POST', '/webhooks', { raw: '', headers: { 'content-type': 'application/json' } }), 400), 'an operation that takes a body: an empty one is 400')
      assert.ok(isErrorBody(await call(server, 'POST', '/webhooks/999/replay', { body: { after: 0 } }), 404))
      assert.ok(isErrorBody(await call(server, 'GET', '/webhooks/abc'), 400))
      assert.ok(isErrorBody(await call(server, 'PUT', '/webhooks/1'), 405))

      assert.ok(isErrorBody(await call(server, 'GET', '/webhooks', { token: null }), 401))
      const writer = cli(server, ['tokens', 'create', '--name', 'writer', '--scope', 'plants:read', '--scope', 'plants:write'])
      assert.equal(writer.status, 0, writer.stderr)
      const writerToken = writer.stdout.trim().split('\n').at(-1)!.trim()
      assert.ok(isErrorBody(await call(server, 'GET', '/webhooks', { token: writerToken }), 403), 'admin scope only')
      assert.ok(isErrorBody(await call(server, 'POST', '/webhooks', { token: writerToken, body: { url: 'http://127.0.0.1:9/' } }), 403))

      assert.equal((await call(server, 'DELETE', `/webhooks/${id}`)).status, 204)
      assert.ok(isErrorBody(await call(server, 'GET', `/webhooks/${id}`), 404))
      assert.ok(isErrorBody(await call(server, 'DELETE', `/webhooks/${id}`), 404))

      // The newest deleted, then one more made: a client still holding the deleted id must not reach the new one.
      const newest = (await call(server, 'GET', '/webhooks')).body.at(-1).id as number
      assert.equal((await call(server, 'DELETE', `/webhooks/${newest}`)).status, 204)
      const next = await subscribe(server, { url: 'http://127.0.0.1:9/next' })
      assert.ok(next.id > newest, `a new subscription takes a new id: ${next.id} after ${newest} was deleted`)
      assert.ok(isErrorBody(await call(server, 'DELETE', `/webhooks/${newest}`), 404), 'a stale delete reaches nothing')
      assert.equal((await call(server, 'GET', `/webhooks/${next.id}`)).status, 200)
    })

    test('a delete cut short (its process killed between batches) leaves nothing to show or enable: the subscription is gone, and the next start finishes the delete', async (t) => {
      const first = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const cut = await subscribe(first, { url: 'http://127.0.0.1:9/cut' })
      const kept = await subscribe(first, { url: 'http://127.0.0.1:9/kept' })
      await post(first, '{"id": 1, "name": "Fern"}')
      const hasDeliveries = async (id: number): Promise<boolean> => (await sqlOnce(first, `SELECT id FROM webhook_deliveries WHERE webhook_id = ${id}`)).length > 0
      for (const deadline = Date.now() + 5000; !await hasDeliveries(cut.id) && Date.now() < deadline;) await sleep(100)
      assert.ok(await hasDeliveries(cut.id), 'a delivery was made for it')
      first.process.kill('SIGKILL')
      await first.exited
      // What a delete's first batch had written when its process was killed: the subscription disabled as being deleted, deliveries left.
      await sqlOnce(first, `UPDATE webhooks SET disabled_at = ${kind === 'postgres' ? 'now()' : Date.now()}, disabled_reason = 'Being deleted.' WHERE id = ${cut.id}`)

      const server = await startServer(t, { databaseUrl: first.databaseUrl, token: first.token, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      for (const [method, path, body] of [['GET', `/webhooks/${cut.id}`], ['POST', `/webhooks/${cut.id}/enable`], ['POST', `/webhooks/${cut.id}/rotate-secret`],
        ['POST', `/webhooks/${cut.id}/replay`, { after: 0 }], ['GET', `/webhooks/${cut.id}/deliveries`], ['POST', `/webhooks/${cut.id}/deliveries/1/retry`]] as Array<[string, string, unknown?]>) {
        assert.ok(isErrorBody(await call(server, method, path, { body }), 404), `${method} ${path}`)
      }
      assert.deepEqual((await call(server, 'GET', '/webhooks')).body.map((w: { id: number }) => w.id), [kept.id])
      const left = async (): Promise<number> => (await sqlOnce(server, `SELECT id FROM webhooks WHERE id = ${cut.id} UNION ALL SELECT id FROM webhook_deliveries WHERE webhook_id = ${cut.id}`)).length
      for (const deadline = Date.now() + 5000; await left() > 0 && Date.now() < deadline;) await sleep(100)
      assert.equal(await left(), 0, 'the start finished the delete: neither the subscription nor its deliveries are left')
      assert.ok(await hasDeliveries(kept.id), 'the other subscription keeps its own')
    })

    test('deliveries: signed per Standard Webhooks, the exact plant record, event type and position; tampering and a wrong secret fail', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const receiver = await startReceiver(t)
      const { secret } = await subscribe(server, { url: `${receiver.url}/hook`, events: ['plant.created', 'plant.updated', 'plant.deleted'] })
      await post(server, `{"id": ${BIG}, "name": "Fern", "tag": "shade"}`)
      const committed = Date.now() // the change was committed before the answer
      const [first] = await receiver.waitFor(1, 5000)
      assert.ok(first.at - committed < 1000, `the first attempt follows the change within a second (${first.at - committed} ms)`)
      assert.equal((await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Fern' } })).status, 200)
      assert.equal((await call(server, 'DELETE', `/plants/${BIG}`)).status, 204)
      const received = (await receiver.waitFor(3, 5000)).sort((a, b) => Number(a.headers['webhook-position']) - Number(b.headers['webhook-position']))

      assert.deepEqual(received.map(r => [r.path, r.headers['webhook-event-type'], r.headers['webhook-position'], r.headers['webhook-id'], r.headers['content-type'], r.body]), [
        ['/hook', 'plant.created', '1', 'chg_1', 'application/json', `{"id":${BIG},"name":"Fern","tag":"shade"}`],
        ['/hook', 'plant.updated', '2', 'chg_2', 'application/json', `{"id":${BIG},"name":"Fern"}`],
        ['/hook', 'plant.deleted', '3', 'chg_3', 'application/json', `{"id":${BIG},"name":"Fern"}`]
      ])
      const webhook = new Webhook(secret)
      for (const request of received) {
        const payload = webhook.verify(request.body, headersOf(request)) as { id: number }
        assert.equal(typeof payload.id, 'number', 'the library parses it; the raw body holds the exact id')
        assert.ok(Math.abs(Number(request.headers['webhook-timestamp']) - Date.now() / 1000) < 10)
      }
      assert.throws(() => webhook.verify(received[0].body.replace('Fern', 'Fern!'), headersOf(received[0])), /signature/i, 'a tampered body fails')
      assert.throws(() => new Webhook('whsec_' + Buffer.alloc(32, 9).toString('base64')).verify(received[0].body, headersOf(received[0])), /signature/i, 'a wrong secret fails')
      assert.throws(() => webhook.verify(received[0].body, { ...headersOf(received[0]), 'webhook-id': 'chg_2' }), /signature/i, 'the id is signed')
    })

    test('a rotated secret: both sign for the overlap, two v1 signatures in one header', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const receiver = await startReceiver(t)
      const { id, secret } = await subscribe(server, { url: receiver.url })
      const before = Date.now()
      const rotated = await call(server, 'POST', `/webhooks/${id}/rotate-secret`)
      const after = Date.now()
      assert.equal(rotated.status, 200, rotated.text)
      const [{ until }] = await sqlOnce(server, kind === 'postgres' ? 'SELECT round(extract(epoch FROM previous_until) * 1000)::float8 AS until FROM webhooks' : 'SELECT previous_until AS until FROM webhooks') as Array<{ until: number | bigint }>
      assert.ok(Number(until) >= before + DAY && Number(until) <= after + DAY, `the replaced secret signs until ${new Date(Number(until)).toISOString()}: 24 hours on`)
      assert.deepEqual(Object.keys(rotated.body), ['secret'])
      assert.notEqual(rotated.body.secret, secret)
      await post(server, '{"id": 1, "name": "Fern"}')
      const [request] = await receiver.waitFor(1, 5000)
      assert.match(String(request.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]+=* v1,[A-Za-z0-9+/]+=*$/)
      new Webhook(rotated.body.secret).verify(request.body, headersOf(request))
      new Webhook(secret).verify(request.body, headersOf(request))
    })

    test('the delivery log keeps a settled delivery 30 days after its last attempt; the pruning at a start drops it after that', async (t) => {
      const env = { WEBHOOKS_ALLOW_PRIVATE: 'true' }
      const first = await startServer(t, { store: kind, env })
      const receiver = await startReceiver(t)
      const { id } = await subscribe(first, { url: receiver.url })
      await post(first, '{"id": 1, "name": "Old"}')
      await post(first, '{"id": 2, "name": "Recent"}')
      await receiver.waitFor(2, 5000)
      for (const deadline = Date.now() + 5000; (await call(first, 'GET', `/webhooks/${id}/deliveries?status=delivered`)).body.length < 2;) {
        assert.ok(Date.now() < deadline, 'both recorded delivered')
        await sleep(50)
      }
      first.process.kill('SIGTERM')
      await first.exited
      // Both made 31 days ago; last attempted 31 days ago (position 1) and 29 days ago (position 2).
      const daysAgo = (days: number): string => kind === 'postgres' ? `to_timestamp(${Date.now() - days * DAY} / 1000.0)` : String(Date.now() - days * DAY)
      await sqlOnce(first, `UPDATE webhook_deliveries SET created_at = ${daysAgo(31)}`)
      for (const [position, days] of [[1, 31], [2, 29]]) {
        await sqlOnce(first, `UPDATE webhook_attempts SET at = ${daysAgo(days)} WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE position = ${position})`)
      }
      const server = await startServer(t, { databaseUrl: first.databaseUrl, token: first.token, env })
      let kept: Array<{ position: number }> = []
      for (const deadline = Date.now() + 5000; Date.now() < deadline; await sleep(50)) {
        kept = (await call(server, 'GET', `/webhooks/${id}/deliveries`)).body
        if (kept.length < 2) break
      }
      assert.deepEqual(kept.map(delivery => delivery.position), [2], 'the one last attempted 31 days ago is gone, the one 29 days ago kept')
    })

    test('the change log keeps a change past CHANGES_RETENTION while a delivery of it is pending; what no delivery needs goes', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true', CHANGES_RETENTION: '1s' } })
      const receiver = await startReceiver(t)
      receiver.answer = (_request, response) => { response.writeHead(500).end() } // retried in 5 s, then 5 min
      await post(server, '{"id": 1, "name": "Before the subscription"}') // 1: no delivery
      const { id } = await subscribe(server, { url: receiver.url })
      await post(server, '{"id": 2, "name": "Delivered late"}') // 2: a delivery, failing
      await receiver.waitFor(1, 5000)
      await sleep(2500) // past the retention, and several prunings (every 100 ms)
      assert.ok(isErrorBody(await call(server, 'GET', '/plants/changes?after=0'), 410), 'change 1 is gone')
      const kept = await call(server, 'GET', '/plants/changes?after=1')
      assert.equal(kept.status, 200, kept.text)
      assert.deepEqual(kept.body.map((change: { position: number }) => change.position), [2])
      assert.equal((await call(server, 'POST', `/webhooks/${id}/replay`, { body: { after: 1 } })).status, 202, 'a replay from there is served')
    })

    test('the tag and events filters; the delivery log, retry and replay', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const receiver = await startReceiver(t)
      const { id } = await subscribe(server, { url: receiver.url, events: ['plant.updated'], tag: 'shade' })
      await post(server, '{"id": 1, "name": "Fern", "tag": "shade"}') // 1: created, not subscribed
      assert.equal((await call(server, 'PUT', '/plants/1', { body: { name: 'Fern', tag: 'sun' } })).status, 200) // 2: shade before
      assert.equal((await call(server, 'PUT', '/plants/1', { body: { name: 'Fern II', tag: 'sun' } })).status, 200) // 3: no shade
      await post(server, '{"id": 2, "name": "Moss", "tag": "shade"}') // 4: created
      assert.equal((await call(server, 'PUT', '/plants/2', { body: { name: 'Moss', tag: 'shade' } })).status, 200) // 5
      const received = await receiver.waitFor(2, 5000)
      await new Promise(resolve => setTimeout(resolve, 300))
      assert.deepEqual(received.map(r => r.headers['webhook-position']).sort(), ['2', '5'], 'updates that carried shade before or after, only')

      const log = await call(server, 'GET', `/webhooks/${id}/deliveries?limit=1`)
      assert.equal(log.status, 200, log.text)
      assert.equal(log.body.length, 1)
      const [entry] = parseExact<Array<{ id: string, position: string, status: string, attempts: Array<{ statusCode: number }>, plant: unknown, type: string }>>(log.text)
      assert.equal(entry.status, 'delivered')
      assert.equal(entry.type, 'plant.updated')
      assert.deepEqual(entry.attempts.map(a => a.statusCode), [204])
      const next = /^<(\/webhooks\/\d+\/deliveries\?limit=1&after=\d+)>; rel="next"$/.exec(log.headers.get('link') ?? '')
      assert.ok(next, String(log.headers.get('link')))
      const page2 = await call(server, 'GET', next[1])
      assert.equal(page2.body.length, 1)
      assert.equal(page2.body[0].status, 'delivered')
      assert.equal((await call(server, 'GET', `/webhooks/${id}/deliveries?status=pending`)).body.length, 0)
      assert.ok(isErrorBody(await call(server, 'GET', `/webhooks/${id}/deliveries?status=lost`), 400))

      const retried = await call(server, 'POST', `/webhooks/${id}/deliveries/${log.body[0].id}/retry`)
      assert.equal(retried.status, 202, retried.text)
      assert.equal(retried.body.status, 'pending')
      await receiver.waitFor(3, 5000)
      assert.equal(receiver.received[2].headers['webhook-id'], received.find(r => r.headers['webhook-position'] === String(entry.position))!.headers['webhook-id'], 'the same webhook-id again')
      assert.ok(isErrorBody(await call(server, 'POST', `/webhooks/${id}/deliveries/99999/retry`), 404))

      const replayed = await call(server, 'POST', `/webhooks/${id}/replay`, { body: { after: 0 } })
      assert.equal(replayed.status, 202, replayed.text)
      assert.deepEqual(replayed.body, { queued: 2 })
      await receiver.waitFor(5, 5000)
      assert.deepEqual(receiver.received.slice(3).map(r => r.headers['webhook-id']).sort(), ['chg_2', 'chg_5'])
      assert.ok(isErrorBody(await call(server, 'POST', `/webhooks/${id}/replay`, { body: { after: 6 } }), 410), 'beyond the head')
      assert.ok(isErrorBody(await call(server, 'POST', `/webhooks/${id}/replay`, { body: { after: -1 } }), 400))
      assert.ok(isErrorBody(await call(server, 'POST', `/webhooks/${id}/replay`, { body: {} }), 400))
    })

    test('a 410 disables the subscription; it shows so, sends nothing, and is enabled again', async (t) => {
      const server = await startServer(t, { store: kind, env: { WEBHOOKS_ALLOW_PRIVATE: 'true' } })
      const receiver = await startReceiver(t)
      receiver.answer = (_request, response) => { response.writeHead(410).end() }
      const { id } = await subscribe(server, { url: receiver.url })
      await post(server, '{"id": 1, "name": "Fern"}')
      await receiver.waitFor(1, 5000)
      let shown: { enabled: boolean, disabledReason?: string } | undefined
      for (let i = 0; i < 100 && shown?.enabled !== false; i++) {
        shown = (await call(server, 'GET', `/webhooks/${id}`)).body
        await new Promise(resolve => setTimeout(resolve, 20))
      }
      assert.equal(shown?.enabled, false)
      assert.equal(shown?.disabledReason, 'The receiver answered 410 Gone.')
      const metrics = parseMetrics((await call(server, 'GET', '/metrics', { token: null })).text)
      assert.equal(sampleValue(metrics, 'plantstore_webhooks_disabled'), 1)
      assert.equal(sampleValue(metrics, 'plantstore_webhook_attempts_total', { outcome: 'retrying' }), 1, 'to go again once enabled')
      assert.equal(sampleValue(metrics, 'plantstore_webhook_attempt_duration_seconds_count', { outcome: 'retrying' }), 1)
      assert.equal(sampleValue(metrics, 'plantstore_webhook_deliveries_due'), 0, 'a disabled subscription has none due')
      assert.equal(sampleValue(metrics, 'plantstore_webhook_attempts_in_flight'), 0)
      await post(server, '{"id": 2, "name": "Moss"}')
      await new Promise(resolve => setTimeout(resolve, 1000))
      assert.equal(receiver.received.length, 1, 'nothing is sent while disabled')
      const [kept] = (await call(server, 'GET', `/webhooks/${id}/deliveries`)).body as Array<{ id: number, status: string, attempts: Array<{ statusCode?: number }> }>
      assert.deepEqual([kept.status, kept.attempts.map(attempt => attempt.statusCode)], ['pending', [410]], 'the delivery the 410 answered is kept, pending')
      const refused = await call(server, 'POST', `/webhooks/${id}/deliveries/${kept.id}/retry`)
      assert.ok(isErrorBody(refused, 409), `a retry while disabled would send nothing: ${refused.status} ${refused.text}`)
      assert.match(refused.body.message, /enable it/)
      assert.deepEqual((await call(server, 'GET', `/webhooks/${id}/deliveries`)).body[0].attempts.length, 1, 'the refused retry changed nothing')
      assert.ok(isErrorBody(await call(server, 'POST', `/webhooks/${id}/deliveries/${kept.id + 1000}/retry`), 404), 'a delivery it lacks: 404, disabled or not')
      receiver.answer = (_request, response) => { response.writeHead(204).end() }
      const enabled = await call(server, 'POST', `/webhooks/${id}/enable`)
      assert.equal(enabled.status, 200, enabled.text)
      assert.equal(enabled.body.enabled, true)
      assert.equal(enabled.body.disabledReason, undefined)
      await receiver.waitFor(2, 5000)
      assert.equal(receiver.received[1].headers['webhook-position'], '1', 'the change the 410 answered goes at once')
      await post(server, '{"id": 3, "name": "Ivy"}')
      await receiver.waitFor(3, 5000)
      assert.equal(receiver.received[2].headers['webhook-position'], '3', 'changes from the enable on; the one made while disabled needs a replay')
      assert.equal((await call(server, 'GET', `/webhooks/${id}/deliveries`)).body.find((delivery: { id: number }) => delivery.id === kept.id).status, 'delivered')
    })
  })
}

test('without WEBHOOKS_ALLOW_PRIVATE, URLs on loopback, private, link-local, unique-local and metadata addresses are refused', async (t) => {
  const server = await startServer(t)
  for (const url of ['http://127.0.0.1:8080/', 'http://127.1/', 'http://2130706433/', 'http://0x7f000001/', 'http://localhost/', 'http://[::1]/', 'http://[::ffff:127.0.0.1]/',
    'http://10.0.0.1/', 'http://172.16.5.4/', 'http://192.168.1.1/', 'http://169.254.169.254/latest/meta-data/', 'http://[fd00:ec2::254]/', 'http://[fe80::1]/', 'http://0.0.0.0/', 'http://[::]/']) {
    const answer = await call(server, 'POST', '/webhooks', { body: { url } })
    assert.ok(isErrorBody(answer, 400), `${url}: ${answer.status} ${answer.text}`)
  }
  assert.equal((await call(server, 'GET', '/webhooks')).body.length, 0, 'nothing was stored')
})
