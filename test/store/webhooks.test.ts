// The webhook store contract (SPEC section 5): deliveries made out of the change log, leased one
// sender at a time, their outcomes recorded; the same behaviours on SQLite always and on
// PostgreSQL when TEST_DATABASE_URL names a server. Times are injected: nothing here waits.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { setTimeout } from 'node:timers/promises'
import pg from 'pg'
import { StoreUnavailableError } from '../../src/errors.js'
import { PostgresStore } from '../../src/store/postgres.js'
import type { Store } from '../../src/store/store.js'
import type { AttemptOutcome, ClaimedDelivery } from '../../src/store/webhooks.js'
import { openStore } from '../../src/store/open.js'
import { freshDatabase, testStores } from '../helpers.js'
import { openTestStore, sqlOnce } from '../stored.js'

const T0 = new Date('2026-11-25T00:00:00.000Z')
const at = (ms: number): Date => new Date(T0.getTime() + ms)
const BIG = 9223372036854775807n
const SECRET = 'whsec_' + Buffer.alloc(32, 1).toString('base64')
const LIMITS = { total: 100, perSubscription: 100 }

const positions = (claimed: ClaimedDelivery[]): bigint[] => claimed.map(delivery => delivery.position).sort((a, b) => Number(a - b))

function outcome (delivery: ClaimedDelivery, when: Date, result: Partial<AttemptOutcome>): AttemptOutcome {
  return { deliveryId: delivery.id, webhookId: delivery.webhookId, leaseUntil: delivery.leaseUntil, attempt: { at: when, durationMs: 3 }, delivered: false, ...result }
}

for (const kind of testStores()) {
  const open = async (t: TestContext): Promise<Store> => await openTestStore(t, kind)

  test(`${kind}: a subscription gets the changes after its creation that match its events and tag (before or after), each once`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'before' })
    const all = await store.webhooks.create({ url: 'https://example.com/all', events: ['plant.created', 'plant.updated', 'plant.deleted'], secret: SECRET }, T0)
    const shade = await store.webhooks.create({ url: 'https://example.com/shade', events: ['plant.updated', 'plant.deleted'], tag: 'shade', secret: SECRET }, T0)
    assert.deepEqual(all, { id: all.id, url: 'https://example.com/all', events: ['plant.created', 'plant.updated', 'plant.deleted'], createdAt: T0 })
    assert.equal(shade.tag, 'shade')
    await store.create({ id: BIG, name: 'Fern', tag: 'shade' }) // 2
    await store.replace(BIG, { name: 'Fern', tag: 'sun' }) // 3: shade before
    await store.replace(BIG, { name: 'Fern II', tag: 'sun' }) // 4: shade neither before nor after
    await store.remove(BIG) // 5
    await store.remove(1n) // 6

    assert.deepEqual(await store.webhooks.outlook(), { head: 6n, subscriptions: 2, behind: true })
    assert.equal(await store.webhooks.enqueue(T0, 500), 5 + 1)
    assert.equal(await store.webhooks.enqueue(T0, 500), 0, 'a change is made a delivery once')
    assert.deepEqual(await store.webhooks.outlook(), { head: 6n, subscriptions: 2, behind: false, nextDue: T0 })
    const claimed = await store.webhooks.claim(T0, at(20_000), LIMITS)
    assert.deepEqual(positions(claimed.filter(d => d.webhookId === all.id)), [2n, 3n, 4n, 5n, 6n])
    assert.deepEqual(positions(claimed.filter(d => d.webhookId === shade.id)), [3n])
    const deleted = claimed.find(d => d.webhookId === all.id && d.position === 5n)!
    assert.deepEqual({ type: deleted.type, plant: deleted.plant, attempts: deleted.attempts, url: deleted.url, secrets: deleted.secrets },
      { type: 'plant.deleted', plant: { id: BIG, name: 'Fern II', tag: 'sun' }, attempts: 0, url: 'https://example.com/all', secrets: [SECRET] }, 'the plant as it was, its id exact')
  })

  test(`${kind}: a leased delivery is nobody else's until its lease ends; the caps per subscription and in all hold`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (let id = 1n; id <= 5n; id++) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 2) // a batch of 2 changes at a time
    assert.equal((await store.webhooks.outlook()).behind, true, 'the rest waits for the next batch')
    await store.webhooks.enqueue(T0, 2)
    await store.webhooks.enqueue(T0, 2)
    assert.equal((await store.webhooks.outlook()).behind, false)

    const first = await store.webhooks.claim(T0, at(20_000), { total: 10, perSubscription: 2 })
    assert.deepEqual(positions(first), [1n, 2n], 'two leased at most for one subscription, oldest first')
    assert.deepEqual(await store.webhooks.claim(at(1), at(20_000), { total: 10, perSubscription: 2 }), [], 'while two are leased, none more')
    const third = await store.webhooks.claim(at(1), at(20_000), { total: 1, perSubscription: 3 })
    assert.deepEqual(positions(third), [3n], 'the cap in all')
    await store.webhooks.record([outcome(first[0], at(5), { delivered: true })])
    assert.deepEqual(positions(await store.webhooks.claim(at(6), at(20_000), { total: 10, perSubscription: 3 })), [4n], 'a place freed is taken')

    // The sender of `first[1]` died: once its lease has run out, another takes it, the same delivery.
    const again = await store.webhooks.claim(at(20_001), at(40_000), { total: 10, perSubscription: 10 })
    assert.deepEqual(positions(again), [2n, 3n, 4n, 5n])
    assert.equal(again.find(d => d.position === 2n)!.id, first[1].id)
    assert.equal(again[0].webhookId, hook.id)
  })

  test(`${kind}: outcomes: delivered, due again, failed for good; a 410 disables at once, five days of failures too, a success in between resets`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (let id = 1n; id <= 3n; id++) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const [d1, d2, d3] = (await store.webhooks.claim(T0, at(20_000), LIMITS)).sort((a, b) => Number(a.position - b.position))
    await store.webhooks.record([
      outcome(d1, T0, { delivered: true, attempt: { at: T0, durationMs: 4.4, statusCode: 204 } }),
      outcome(d2, T0, { nextAt: at(5000), attempt: { at: T0, durationMs: 2, statusCode: 500 } }),
      outcome(d3, T0, { attempt: { at: T0, durationMs: 15000, error: 'no answer within 15 s' } })
    ])
    const log = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual(log.map(d => [d.position, d.status, d.nextAt, d.attempts]), [
      [1n, 'delivered', undefined, [{ at: T0, durationMs: 4, statusCode: 204 }]],
      [2n, 'pending', at(5000), [{ at: T0, durationMs: 2, statusCode: 500 }]],
      [3n, 'failed', undefined, [{ at: T0, durationMs: 15000, error: 'no answer within 15 s' }]]
    ])
    assert.deepEqual((await store.webhooks.deliveries(hook.id, { status: 'pending', limit: 10 })).map(d => d.position), [2n])
    assert.deepEqual((await store.webhooks.deliveries(hook.id, { after: log[0].id, limit: 1 })).map(d => d.position), [2n], 'pages by id')
    assert.deepEqual(await store.webhooks.claim(at(4999), at(30_000), LIMITS), [], 'not due before its time')
    assert.deepEqual(await store.webhooks.backlog(at(5000)), { due: 1, disabled: 0 })

    // Failing from T0 on: at T0 + 5 days the subscription is disabled; a success before that resets the count.
    const [retry] = await store.webhooks.claim(at(5000), at(30_000), LIMITS)
    await store.webhooks.record([outcome(retry, at(86_400_000), { nextAt: at(2 * 86_400_000) })])
    assert.equal((await store.webhooks.get(hook.id))!.disabled, undefined)
    await store.webhooks.retry(hook.id, retry.id, at(4 * 86_400_000))
    const [later] = await store.webhooks.claim(at(4 * 86_400_000), at(4 * 86_400_000 + 20_000), LIMITS)
    await store.webhooks.record([outcome(later, at(5 * 86_400_000), { nextAt: at(6 * 86_400_000) })])
    assert.deepEqual((await store.webhooks.get(hook.id))!.disabled, { at: at(5 * 86_400_000 + 3), reason: 'Every delivery failed for five days.' }, 'from the end of the attempt that made five days')
    assert.deepEqual(await store.webhooks.claim(at(7 * 86_400_000), at(8 * 86_400_000), LIMITS), [], 'a disabled subscription sends nothing')
    assert.deepEqual(await store.webhooks.backlog(at(7 * 86_400_000)), { due: 0, disabled: 1 })

    const enabled = await store.webhooks.enable(hook.id, at(7 * 86_400_000))
    assert.equal(enabled!.disabled, undefined)
    await store.create({ id: 4n, name: 'p4' })
    await store.webhooks.enqueue(at(7 * 86_400_000), 500)
    const resumed = await store.webhooks.claim(at(7 * 86_400_000), at(8 * 86_400_000), LIMITS)
    assert.deepEqual(positions(resumed), [2n, 4n], 'its pending delivery due at once, and changes from the enable on')
    await store.webhooks.record([outcome(resumed[0], at(7 * 86_400_000), { delivered: true }), outcome(resumed[1], at(7 * 86_400_000), { disable: 'The receiver answered 410 Gone.', attempt: { at: at(7 * 86_400_000), durationMs: 1049.4, statusCode: 410 } })])
    assert.deepEqual((await store.webhooks.get(hook.id))!.disabled, { at: at(7 * 86_400_000 + 1049), reason: 'The receiver answered 410 Gone.' }, 'a 410 disables at once, from when it came')
  })

  test(`${kind}: retry, replay within the log, delete with its deliveries, prune of the settled`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created', 'plant.deleted'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.create({ id: 2n, name: 'p2', tag: 'x' })
    await store.remove(2n)
    await store.webhooks.enqueue(T0, 500)
    const claimed = await store.webhooks.claim(T0, at(20_000), LIMITS)
    await store.webhooks.record(claimed.map(d => outcome(d, T0, { delivered: true })))
    assert.deepEqual(await store.webhooks.claim(at(1), at(20_000), LIMITS), [])

    const retried = await store.webhooks.retry(hook.id, claimed[0].id, at(10))
    assert.equal(retried?.status, 'pending')
    assert.equal(retried?.attempts.length, 1)
    assert.equal(await store.webhooks.retry(hook.id, 999_999, at(10)), undefined)
    assert.equal(await store.webhooks.retry(hook.id + 1, claimed[0].id, at(10)), undefined, 'a delivery of another subscription is not found')
    assert.equal((await store.webhooks.claim(at(10), at(20_000), LIMITS)).length, 1)

    assert.equal(await store.webhooks.replay(hook.id, 0n, at(20)), 3)
    assert.equal(await store.webhooks.replay(hook.id, 2n, at(20)), 1)
    assert.equal(await store.webhooks.replay(hook.id, 4n, at(20)), 'gone', 'beyond the head')
    assert.equal(await store.webhooks.replay(hook.id + 1, 0n, at(20)), 'not-found')
    assert.deepEqual(positions(await store.webhooks.claim(at(20), at(20_000), LIMITS)), [1n, 2n, 3n, 3n])

    assert.equal(await store.webhooks.prune(at(1), 1000), 2, 'the two settled deliveries made at T0; pending ones stay')
    assert.equal((await store.webhooks.deliveries(hook.id, { limit: 10 })).length, 5)
    assert.equal(await store.webhooks.rotate(hook.id, SECRET.replace('A', 'B'), at(86_400_000)), true)
    assert.equal(await store.webhooks.remove(hook.id), true)
    assert.equal(await store.webhooks.remove(hook.id), false)
    assert.deepEqual(await store.webhooks.list(), [])
    assert.deepEqual(await store.webhooks.deliveries(hook.id, { limit: 10 }), [])
  })

  test(`${kind}: a settled delivery stays in the log until its last attempt, not only its making, is older than the cutoff`, async (t) => {
    const store = await open(t)
    const DAY = 86_400_000
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (const id of [1n, 2n]) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const [first, second] = (await store.webhooks.claim(T0, at(20_000), LIMITS)).sort((a, b) => Number(a.position - b.position))
    await store.webhooks.record([outcome(first, T0, { delivered: true }), outcome(second, T0, { delivered: true })])
    // The second is sent again by hand on day 29, and delivered.
    assert.equal((await store.webhooks.retry(hook.id, second.id, at(29 * DAY)))?.status, 'pending')
    const [again] = await store.webhooks.claim(at(29 * DAY), at(29 * DAY + 20_000), LIMITS)
    await store.webhooks.record([outcome(again, at(29 * DAY), { delivered: true })])
    assert.equal(await store.webhooks.prune(at(DAY), 1000), 1, 'a cutoff after both were made: only the one last attempted before it goes')
    assert.deepEqual((await store.webhooks.deliveries(hook.id, { limit: 10 })).map(d => [d.id, d.attempts.length]), [[second.id, 2]])
    assert.equal(await store.webhooks.prune(at(29 * DAY), 1000), 0, 'its last attempt is not before the cutoff')
    assert.equal(await store.webhooks.prune(at(29 * DAY + 1), 1000), 1)
    assert.deepEqual(await store.webhooks.deliveries(hook.id, { limit: 10 }), [])
  })

  test(`${kind}: a retry asked for while an attempt is under way stands once it fails, even for good; a delivery it delivered stays delivered`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (const id of [1n, 2n, 3n]) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const [d1, d2, d3] = (await store.webhooks.claim(T0, at(20_000), LIMITS)).sort((a, b) => Number(a.position - b.position))
    for (const delivery of [d1, d2, d3]) assert.equal((await store.webhooks.retry(hook.id, delivery.id, at(1000)))?.status, 'pending')
    assert.deepEqual(await store.webhooks.claim(at(1000), at(21_000), LIMITS), [], 'not while the attempts hold their leases')
    await store.webhooks.record([
      outcome(d1, at(15_000), { nextAt: at(20_000) }), // failed, retrying later by its schedule
      outcome(d2, at(15_000), {}), // failed for good
      outcome(d3, at(15_000), { delivered: true })
    ])
    const states = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual(states.map(d => [d.status, d.nextAt?.getTime()]), [['pending', at(1000).getTime()], ['pending', at(1000).getTime()], ['delivered', states[2].nextAt?.getTime()]])
    assert.deepEqual(positions(await store.webhooks.claim(at(15_001), at(35_000), LIMITS)), [1n, 2n], 'the retried two are due at once')
  })

  test(`${kind}: an enable while an attempt is under way leaves the delivery to its outcome: its schedule, or failed for good`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (const id of [1n, 2n, 3n]) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const [d1, d2, d3] = (await store.webhooks.claim(T0, at(20_000), LIMITS)).sort((a, b) => Number(a.position - b.position))
    await store.webhooks.record([outcome(d1, at(1000), { disable: 'The receiver answered 410 Gone.' })])
    assert.equal((await store.webhooks.get(hook.id))?.disabled?.reason, 'The receiver answered 410 Gone.')
    assert.equal((await store.webhooks.enable(hook.id, at(2000)))?.disabled, undefined)
    await store.webhooks.record([outcome(d2, at(15_000), { nextAt: at(60_000) }), outcome(d3, at(15_000), {})])
    const states = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual(states.map(d => [d.status, d.nextAt?.getTime()]).slice(1), [['pending', at(60_000).getTime()], ['failed', states[2].nextAt?.getTime()]])
    assert.deepEqual(await store.webhooks.claim(at(15_001), at(35_000), LIMITS), [], 'the enable brought nothing forward')
  })

  test(`${kind}: after a rotation both secrets sign until the overlap ends`, async (t) => {
    const store = await open(t)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: 'whsec_old' }, T0)
    await store.webhooks.rotate(hook.id, 'whsec_new', at(86_400_000))
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [during] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    assert.deepEqual(during.secrets, ['whsec_new', 'whsec_old'])
    const [after] = await store.webhooks.claim(at(86_400_000), at(86_420_000), LIMITS)
    assert.deepEqual(after.secrets, ['whsec_new'])
  })
}

for (const kind of testStores()) {
  test(`${kind}: enabling a subscription that is enabled changes nothing: its backlog and its schedule stay`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.create({ id: 2n, name: 'p2' })
    await store.webhooks.enqueue(T0, 1) // one change made a delivery; the other still waits behind the cursor
    const [claimed] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    await store.webhooks.record([outcome(claimed, T0, { nextAt: at(5000) })])
    assert.equal((await store.webhooks.enable(hook.id, at(1)))?.id, hook.id)
    assert.deepEqual(await store.webhooks.claim(at(1), at(20_000), LIMITS), [], 'the retry is not brought forward')
    await store.webhooks.enqueue(at(1), 500)
    assert.deepEqual(positions(await store.webhooks.claim(at(5000), at(30_000), LIMITS)), [1n, 2n], 'the change behind the cursor was not skipped')
    assert.equal(await store.webhooks.enable(hook.id + 1, at(1)), undefined)
  })
}

for (const kind of testStores()) {
  test(`${kind}: the log keeps what an enabled subscription has not made deliveries of, and the changes of its pending deliveries; a disable makes them at once`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    for (let id = 1n; id <= 3n; id++) await store.create({ id, name: `p${id}` })
    const future = new Date(Date.now() + 86_400_000)
    assert.equal(await store.pruneChanges(future, 1000), 0, 'the cursor is behind every change: retention waits')
    await store.webhooks.enqueue(T0, 2)
    assert.equal(await store.pruneChanges(future, 1000), 0, 'changes 1 and 2 are deliveries now, pending: they still need their changes')
    const [d1, d2] = (await store.webhooks.claim(T0, at(20_000), LIMITS)).sort((a, b) => Number(a.position - b.position))
    await store.webhooks.record([outcome(d1, at(1), { delivered: true })])
    assert.equal(await store.pruneChanges(future, 1000), 1, 'up to the oldest delivery still pending')

    // A 410 disables it while change 3 is not yet a delivery: it is made one then, due once enabled.
    await store.webhooks.record([outcome(d2, at(1), { disable: 'The receiver answered 410 Gone.' })])
    assert.equal((await store.webhooks.get(hook.id))!.disabled?.reason, 'The receiver answered 410 Gone.')
    await store.create({ id: 4n, name: 'p4' })
    assert.equal(await store.pruneChanges(future, 1000), 3, 'a disabled subscription does not hold the log, by its cursor or by its pending deliveries')
    await store.create({ id: 5n, name: 'p5' })
    assert.equal(await store.webhooks.replay(hook.id, 4n, at(2)), 1, 'a replay while disabled reaches the head: change 5')
    await store.webhooks.enable(hook.id, at(2))
    await store.webhooks.enqueue(at(2), 500)
    assert.deepEqual(positions(await store.webhooks.claim(at(2), at(20_000), LIMITS)), [3n, 5n], 'the change before the disable, and the one replayed; no other made while it was disabled')
  })

  test(`${kind}: a pending delivery whose change the log no longer holds (an old one retried) holds nothing back`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    const future = new Date(Date.now() + 86_400_000)
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [first] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    await store.webhooks.record([outcome(first, T0, { delivered: true })])
    assert.equal(await store.pruneChanges(future, 1000), 1, 'delivered: its change goes')
    assert.equal((await store.webhooks.retry(hook.id, first.id, at(10)))?.status, 'pending', 'sent again by hand, its change gone')
    await store.create({ id: 2n, name: 'p2' })
    await store.webhooks.enqueue(at(10), 500)
    const claimed = await store.webhooks.claim(at(10), at(20_000), LIMITS)
    assert.deepEqual(positions(claimed), [1n, 2n])
    await store.webhooks.record(claimed.filter(d => d.position === 2n).map(d => outcome(d, at(11), { delivered: true })))
    assert.equal(await store.pruneChanges(future, 1000), 1, 'change 2 goes: the retried delivery at 1, below the log, holds nothing')
  })

  test(`${kind}: five days of failures disable a subscription, and the changes logged until then are made its deliveries`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [first] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    await store.webhooks.record([outcome(first, T0, { nextAt: at(86_400_000) })])
    await store.create({ id: 2n, name: 'p2' }) // not yet a delivery when the subscription is disabled
    const [again] = await store.webhooks.claim(at(86_400_000), at(86_420_000), LIMITS)
    await store.webhooks.record([outcome(again, at(5 * 86_400_000), { nextAt: at(6 * 86_400_000) })])
    assert.equal((await store.webhooks.get(hook.id))!.disabled?.reason, 'Every delivery failed for five days.')
    assert.deepEqual((await store.webhooks.deliveries(hook.id, { limit: 10 })).map(d => d.position), [1n, 2n])
  })

  test(`${kind}: an outcome is recorded once, and only under the lease its attempt was made under`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [first] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    // Its sender went silent: the lease ends and another takes the delivery; the first's outcome comes late.
    const [second] = await store.webhooks.claim(at(20_001), at(40_000), LIMITS)
    assert.equal(second.id, first.id)
    await store.webhooks.record([outcome(first, at(20_002), { disable: 'The receiver answered 410 Gone.' })])
    const [log] = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual([log.attempts, log.status, (await store.webhooks.get(hook.id))!.disabled], [[], 'pending', undefined], 'the late outcome changes nothing')
    assert.deepEqual(await store.webhooks.claim(at(20_003), at(40_000), LIMITS), [], 'the second lease holds')
    const delivered = outcome(second, at(20_004), { delivered: true })
    await store.webhooks.record([delivered])
    await store.webhooks.record([delivered]) // recorded again: a retried record whose first try committed
    const [after] = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual([after.status, after.attempts.length], ['delivered', 1])
  })

  test(`${kind}: claims share the places: fewest leased first, an equal part each`, async (t) => {
    const store = await openTestStore(t, kind)
    const subscribe = async (): Promise<number> => (await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)).id
    const a = await subscribe()
    const b = await subscribe()
    for (let id = 1n; id <= 6n; id++) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const count = (claimed: ClaimedDelivery[], id: number): number => claimed.filter(d => d.webhookId === id).length
    const first = await store.webhooks.claim(T0, at(20_000), { total: 3, perSubscription: 10 })
    assert.deepEqual([count(first, a), count(first, b)], [2, 1], 'half each, the odd place to the first')
    const second = await store.webhooks.claim(at(1), at(20_000), { total: 2, perSubscription: 10 })
    assert.deepEqual([count(second, a), count(second, b)], [1, 1], 'the one with fewer leased first')
    // Both hold their cap with receivers that hang; a new subscription's first change waits for no backlog of theirs.
    const c = await subscribe()
    await store.create({ id: 7n, name: 'p7' })
    await store.webhooks.enqueue(at(2), 500)
    const third = await store.webhooks.claim(at(3), at(20_000), { total: 1, perSubscription: 3 })
    assert.deepEqual([count(third, a), count(third, b), count(third, c)], [0, 0, 1])
  })

  test(`${kind}: places one subscription leaves unused go to another with more due`, async (t) => {
    const store = await openTestStore(t, kind)
    const a = (await store.webhooks.create({ url: 'https://example.com/a', events: ['plant.created'], secret: SECRET }, T0)).id
    for (let id = 1n; id <= 20n; id++) await store.create({ id, name: `p${id}` })
    await store.webhooks.enqueue(T0, 500)
    const b = (await store.webhooks.create({ url: 'https://example.com/b', events: ['plant.created'], secret: SECRET }, T0)).id
    await store.create({ id: 21n, name: 'p21' })
    await store.webhooks.enqueue(at(1), 500)
    const claimed = await store.webhooks.claim(at(2), at(20_000), { total: 8, perSubscription: 10 })
    assert.deepEqual([claimed.filter(d => d.webhookId === a).length, claimed.filter(d => d.webhookId === b).length], [7, 1])
  })

  test(`${kind}: a subscription being deleted is gone to all but its delete: not read, listed, enabled, rotated, replayed, retried or counted as disabled; nothing is made for it`, async (t) => {
    const database = await freshDatabase(t, kind)
    const store = await openStore(database.databaseUrl)
    t.after(() => store.close())
    const hook = await store.webhooks.create({ url: 'https://example.com/going', events: ['plant.created'], secret: SECRET }, T0)
    const kept = await store.webhooks.create({ url: 'https://example.com/kept', events: ['plant.created'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [delivery] = await store.webhooks.deliveries(hook.id, { limit: 1 })
    // What a delete's first batch leaves, had its process been killed then (the store has no way to stop one halfway).
    await sqlOnce(database, `UPDATE webhooks SET disabled_at = ${kind === 'postgres' ? 'now()' : T0.getTime()}, disabled_reason = 'Being deleted.' WHERE id = ${hook.id}`)
    await store.create({ id: 2n, name: 'p2' })
    assert.deepEqual(await store.webhooks.beingDeleted(), [hook.id])
    assert.equal(await store.webhooks.get(hook.id), undefined)
    assert.deepEqual((await store.webhooks.list()).map(w => w.id), [kept.id])
    assert.equal(await store.webhooks.enable(hook.id, at(1)), undefined)
    assert.equal(await store.webhooks.rotate(hook.id, SECRET, at(1)), false)
    assert.equal(await store.webhooks.replay(hook.id, 0n, at(1)), 'not-found')
    assert.equal(await store.webhooks.retry(hook.id, delivery.id, at(1)), undefined)
    assert.deepEqual(await store.webhooks.backlog(at(1)), { due: 1, disabled: 0 }, 'the kept one\'s first delivery is due; none is disabled')
    await store.webhooks.enqueue(at(1), 500)
    assert.deepEqual((await store.webhooks.deliveries(hook.id, { limit: 10 })).map(d => d.position), [1n], 'nothing made of the change after it')
    assert.equal(await store.webhooks.remove(hook.id), true, 'its delete is finished')
    assert.deepEqual(await store.webhooks.beingDeleted(), [])
    assert.equal((await store.webhooks.deliveries(kept.id, { limit: 10 })).length, 2)
  })

  test(`${kind}: a replay ends at the cursor (what follows is made deliveries anyway); long replays and deletes go a batch at a time`, async (t) => {
    const store = await openTestStore(t, kind)
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    // Fifty at a time: on PostgreSQL, writes queue for the pool and the log's head within each one's deadline.
    for (let from = 1; from <= 2500; from += 50) {
      await Promise.all(Array.from({ length: 50 }, (_, i) => store.create({ id: BigInt(from + i), name: 'p' })))
    }
    await store.webhooks.enqueue(T0, 1200)
    assert.equal(await store.webhooks.replay(hook.id, 100n, T0), 1100, 'positions 101 to 1200, in two batches')
    assert.equal(await store.webhooks.enqueue(T0, 5000), 1300)
    const all: bigint[] = []
    for (let page = await store.webhooks.deliveries(hook.id, { limit: 1000 }); page.length > 0; page = await store.webhooks.deliveries(hook.id, { after: page.at(-1)!.id, limit: 1000 })) {
      all.push(...page.map(d => d.position))
    }
    const twice = all.filter((position, i) => all.indexOf(position) !== i)
    assert.equal(all.length, 3600)
    assert.deepEqual([twice.length, twice[0], twice.at(-1)], [1100, 101n, 1200n], 'only the replayed range twice')
    // Two deletes at once (a starting instance finishing one it takes for cut short): each found it, and has done what it was asked.
    assert.deepEqual(await Promise.all([store.webhooks.remove(hook.id), store.webhooks.remove(hook.id)]), [true, true])
    assert.deepEqual(await store.webhooks.deliveries(hook.id, { limit: 10 }), [])
    assert.deepEqual(await store.webhooks.beingDeleted(), [])
    assert.equal(await store.webhooks.remove(hook.id), false)
  })
}

if (testStores().includes('postgres')) {
  test('postgres: a claim or record whose caller was answered 503 at the deadline rolls back', async (t) => {
    const database = await freshDatabase(t, 'postgres')
    const store = await PostgresStore.open(database.databaseUrl, { writeTimeoutMs: 1000 })
    t.after(() => store.close())
    const hook = await store.webhooks.create({ url: 'https://example.com/', events: ['plant.created'], secret: SECRET }, T0)
    await store.create({ id: 1n, name: 'p1' })
    await store.webhooks.enqueue(T0, 500)
    const [claimed] = await store.webhooks.claim(T0, at(20_000), LIMITS)
    // Each of record's first two statements waits 700 ms for a lock another session holds: each
    // within the statement timeout, both past the deadline.
    const holders = await Promise.all([0, 1].map(async () => {
      const client = new pg.Client({ connectionString: database.databaseUrl })
      await client.connect()
      t.after(() => client.end())
      await client.query('BEGIN')
      return client
    }))
    await holders[0].query('SELECT 1 FROM webhooks WHERE id = $1 FOR UPDATE', [hook.id])
    await holders[1].query('SELECT 1 FROM webhook_deliveries WHERE id = $1 FOR UPDATE', [claimed.id])
    const release = async (client: pg.Client, ms: number): Promise<void> => { await setTimeout(ms); await client.query('COMMIT') }
    const recording = store.webhooks.record([outcome(claimed, at(1), { delivered: true })])
    await release(holders[0], 700)
    await assert.rejects(recording, (error: Error) => error instanceof StoreUnavailableError)
    await release(holders[1], 400)
    await setTimeout(300) // the transaction goes on to its end
    const [log] = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual([log.status, log.attempts], ['pending', []], 'rolled back: the outcome is the dispatcher\'s to record again')
    await store.webhooks.record([outcome(claimed, at(2), { delivered: true })])
    const [after] = await store.webhooks.deliveries(hook.id, { limit: 10 })
    assert.deepEqual([after.status, after.attempts.length], ['delivered', 1])
  })
}
