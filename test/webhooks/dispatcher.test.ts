// The dispatcher against a real store and real receivers over HTTP, with its clock injected: the
// Standard Webhooks schedule is walked attempt by attempt without waiting hours (SPEC section 5).
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import pino from 'pino'
import { Feed } from '../../src/changes/feed.js'
import type { Store } from '../../src/store/store.js'
import type { Delivery } from '../../src/store/webhooks.js'
import { Dispatcher } from '../../src/webhooks/dispatcher.js'
import { RETRY_SCHEDULE_MS } from '../../src/webhooks/schedule.js'
import { Sender } from '../../src/webhooks/sender.js'
import { startReceiver } from '../receiver.js'
import { openTestStore } from '../stored.js'

const SECRET = 'whsec_' + Buffer.alloc(32, 7).toString('base64')
const log = pino({ level: 'silent' })

interface Harness { store: Store, dispatcher: Dispatcher, clock: { now: Date } }

/** A SQLite store and a started dispatcher whose clock is `clock.now` (the real one when `realTime`). */
async function harness (t: TestContext, options: { timeoutMs?: number, maxInFlight?: number, perSubscription?: number, realTime?: boolean, busy?: () => boolean } = {}): Promise<Harness> {
  const store = await openTestStore(t, 'sqlite')
  const clock = { now: new Date('2026-11-25T00:00:00.000Z') }
  const timeoutMs = options.timeoutMs ?? 2000
  const sender = new Sender({ allowPrivate: true, timeoutMs })
  const dispatcher = new Dispatcher({
    store: store.webhooks,
    feed: new Feed({ store, maxReaders: 10, log }),
    log,
    send: (delivery, now, signal) => sender.attempt(delivery, now, signal),
    timeoutMs,
    maxInFlight: options.maxInFlight ?? 8,
    perSubscription: options.perSubscription ?? 8,
    ...(options.realTime === true ? {} : { now: () => clock.now }),
    random: () => 0.5, // the middle of the jitter: every wait exactly the schedule's
    ...(options.busy === undefined ? {} : { busy: options.busy })
  })
  dispatcher.start()
  t.after(async () => {
    await dispatcher.stop(1000)
    sender.close()
  })
  return { store, dispatcher, clock }
}

/** The subscription's only delivery once it has `attempts` attempts recorded. */
async function afterAttempts (store: Store, webhookId: number, attempts: number): Promise<Delivery> {
  const deadline = Date.now() + 5000
  for (;;) {
    const [delivery] = await store.webhooks.deliveries(webhookId, { limit: 1 })
    if (delivery !== undefined && delivery.attempts.length >= attempts) return delivery
    if (Date.now() > deadline) throw new Error(`no ${attempts} attempts recorded: ${JSON.stringify(delivery?.attempts)}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

test('a failing delivery is attempted on the schedule, never early, ten times, then has failed', async (t) => {
  const { store, dispatcher, clock } = await harness(t)
  const receiver = await startReceiver(t)
  receiver.answer = (_request, response) => { response.writeHead(500).end('down') }
  const hook = await store.webhooks.create({ url: `${receiver.url}/hook`, events: ['plant.created'], secret: SECRET }, clock.now)
  await store.create({ id: 1n, name: 'Fern' })
  dispatcher.poke()
  for (let made = 1; made <= RETRY_SCHEDULE_MS.length + 1; made++) {
    await receiver.waitFor(made)
    const delivery = await afterAttempts(store, hook.id, made)
    assert.deepEqual(delivery.attempts.at(-1), { at: clock.now, durationMs: delivery.attempts.at(-1)!.durationMs, statusCode: 500 })
    if (made === RETRY_SCHEDULE_MS.length + 1) {
      assert.equal(delivery.status, 'failed', 'after the tenth attempt')
      assert.equal(delivery.nextAt, undefined)
      break
    }
    assert.equal(delivery.status, 'pending')
    assert.equal(delivery.nextAt!.getTime() - clock.now.getTime(), RETRY_SCHEDULE_MS[made - 1], `the wait after attempt ${made}`)
    clock.now = new Date(delivery.nextAt!.getTime() - 1)
    dispatcher.poke()
    await new Promise(resolve => setTimeout(resolve, 100))
    assert.equal(receiver.received.length, made, 'not a millisecond early')
    clock.now = delivery.nextAt!
    dispatcher.poke()
  }
  assert.deepEqual(new Set(receiver.received.map(r => r.headers['webhook-id'])), new Set(['chg_1']), 'the same webhook-id on every attempt')
  await new Promise(resolve => setTimeout(resolve, 100))
  assert.equal(receiver.received.length, 10, 'nothing after the last')

  // Sent again by hand (POST …/retry) and failing: failed again at once, past the schedule's end.
  await store.webhooks.retry(hook.id, (await afterAttempts(store, hook.id, 10)).id, clock.now)
  dispatcher.poke()
  const again = await afterAttempts(store, hook.id, 11)
  assert.equal(again.status, 'failed')
  assert.equal(again.nextAt, undefined)
})

test('an attempt sent by hand (retry) that fails is one of the schedule\'s: the next waits as after that many attempts', async (t) => {
  const { store, dispatcher, clock } = await harness(t)
  const receiver = await startReceiver(t)
  receiver.answer = (_request, response) => { response.writeHead(500).end('down') }
  const hook = await store.webhooks.create({ url: receiver.url, events: ['plant.created'], secret: SECRET }, clock.now)
  await store.create({ id: 1n, name: 'Fern' })
  dispatcher.poke()
  const first = await afterAttempts(store, hook.id, 1)
  assert.equal(first.nextAt!.getTime() - clock.now.getTime(), RETRY_SCHEDULE_MS[0])
  clock.now = new Date(clock.now.getTime() + 1000)
  await store.webhooks.retry(hook.id, first.id, clock.now)
  dispatcher.poke()
  const second = await afterAttempts(store, hook.id, 2)
  assert.equal(second.status, 'pending')
  assert.equal(second.nextAt!.getTime() - clock.now.getTime(), RETRY_SCHEDULE_MS[1], 'the wait after a second attempt, not the first\'s again')
})

test('Retry-After lengthens the wait; a redirect is a failure and is not followed; a 410 disables the subscription', async (t) => {
  const { store, dispatcher, clock } = await harness(t)
  const elsewhere = await startReceiver(t)
  const receiver = await startReceiver(t)
  const answers = [
    (response: import('node:http').ServerResponse) => response.writeHead(503, { 'retry-after': '3600' }).end(),
    (response: import('node:http').ServerResponse) => response.writeHead(302, { location: `${elsewhere.url}/moved` }).end(),
    (response: import('node:http').ServerResponse) => response.writeHead(410).end()
  ]
  receiver.answer = (_request, response) => answers[receiver.received.length - 1](response)
  const hook = await store.webhooks.create({ url: receiver.url, events: ['plant.created'], secret: SECRET }, clock.now)
  await store.create({ id: 1n, name: 'Fern' })
  dispatcher.poke()

  const first = await afterAttempts(store, hook.id, 1)
  assert.equal(first.nextAt!.getTime() - clock.now.getTime(), 3_600_000, 'an hour, as asked, rather than 5 s')
  clock.now = first.nextAt!
  dispatcher.poke()
  const second = await afterAttempts(store, hook.id, 2)
  assert.equal(second.attempts[1].statusCode, 302)
  assert.equal(second.status, 'pending')
  assert.equal(elsewhere.received.length, 0, 'the redirect was not followed')
  clock.now = second.nextAt!
  dispatcher.poke()
  const third = await afterAttempts(store, hook.id, 3)
  assert.equal(third.status, 'pending', 'kept, to go once the subscription is enabled')
  assert.equal(third.nextAt?.getTime(), clock.now.getTime(), 'due at once: nothing but the subscription holds it')
  const answered = new Date(third.attempts[2].at.getTime() + third.attempts[2].durationMs)
  assert.deepEqual((await store.webhooks.get(hook.id))!.disabled, { at: answered, reason: 'The receiver answered 410 Gone.' }, 'disabled from when the 410 came')
  await store.create({ id: 2n, name: 'Moss' })
  dispatcher.poke()
  await new Promise(resolve => setTimeout(resolve, 300))
  assert.equal(receiver.received.length, 3, 'a disabled subscription is sent nothing')
})

test('a receiver that does not answer within the timeout is a failed attempt, retried', async (t) => {
  const { store, dispatcher, clock } = await harness(t, { timeoutMs: 300 })
  const receiver = await startReceiver(t)
  receiver.answer = () => {} // never answers
  const hook = await store.webhooks.create({ url: receiver.url, events: ['plant.created'], secret: SECRET }, clock.now)
  await store.create({ id: 1n, name: 'Fern' })
  dispatcher.poke()
  const delivery = await afterAttempts(store, hook.id, 1)
  assert.equal(delivery.attempts[0].error, 'no answer within 0.3 s')
  assert.ok(delivery.attempts[0].durationMs >= 290, `${delivery.attempts[0].durationMs} ms`)
  assert.equal(delivery.status, 'pending')
})

test('a slow receiver (it answers after 14 s) holds up no other subscription: its attempts in flight are capped', async (t) => {
  const { store, dispatcher } = await harness(t, { timeoutMs: 15_000, maxInFlight: 6, perSubscription: 2, realTime: true })
  const slow = await startReceiver(t)
  slow.answer = (_request, response) => { setTimeout(() => response.writeHead(204).end(), 14_000).unref() }
  const fast = await startReceiver(t)
  await store.webhooks.create({ url: slow.url, events: ['plant.created'], secret: SECRET }, new Date())
  await store.webhooks.create({ url: fast.url, events: ['plant.created'], secret: SECRET }, new Date())
  const started = Date.now()
  for (let id = 1n; id <= 40n; id++) await store.create({ id, name: `p${id}` })
  dispatcher.poke()
  await fast.waitFor(40, 5000)
  assert.ok(Date.now() - started < 5000, 'every fast delivery arrived while the slow receiver still held its first two')
  assert.equal(slow.received.length, 2, 'the slow receiver has two attempts in flight, no more')
  assert.ok(dispatcher.attempts <= 6)
})

test('attempts in flight share the stop signal without a warning: more than ten wait on it at once (Node warns past ten listeners)', async (t) => {
  const warnings: Error[] = []
  const onWarning = (warning: Error): void => { warnings.push(warning) }
  process.on('warning', onWarning)
  t.after(() => process.off('warning', onWarning))
  const { store, dispatcher } = await harness(t, { timeoutMs: 15_000, maxInFlight: 24, perSubscription: 24, realTime: true })
  const slow = await startReceiver(t)
  slow.answer = (_request, response) => { setTimeout(() => response.writeHead(204).end(), 1000).unref() }
  await store.webhooks.create({ url: slow.url, events: ['plant.created'], secret: SECRET }, new Date())
  for (let id = 1n; id <= 24n; id++) await store.create({ id, name: `p${id}` })
  dispatcher.poke()
  await slow.waitFor(24, 5000)
  assert.equal(dispatcher.attempts, 24, 'every attempt in flight at once')
  await new Promise(resolve => setImmediate(resolve)) // a warning is emitted on the next tick
  assert.deepEqual(warnings.map(warning => warning.name), [])
})

test('requests come first: while requests have the process, passes are spaced; once they have not, the backlog drains at once', async (t) => {
  let busy = true
  const { store, dispatcher } = await harness(t, { maxInFlight: 8, perSubscription: 8, realTime: true, busy: () => busy })
  const receiver = await startReceiver(t)
  await store.webhooks.create({ url: receiver.url, events: ['plant.created'], secret: SECRET }, new Date())
  for (let id = 1n; id <= 300n; id++) await store.create({ id, name: `p${id}` })
  dispatcher.poke()
  await new Promise(resolve => setTimeout(resolve, 1500))
  const duringLoad = receiver.received.length
  busy = false
  assert.ok(duringLoad <= 8 * 8, `${duringLoad} deliveries in 1.5 s of busy: passes 250 ms apart, 8 each at most`)
  const freed = Date.now()
  await receiver.waitFor(300, 5000)
  assert.ok(Date.now() - freed < 2000, `the backlog drained in ${Date.now() - freed} ms once free`)
})
