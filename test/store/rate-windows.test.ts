// The rate limit's shared windows on a real PostgreSQL schema: the sync statement, and limiters of two instances.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { RateLimiter, WINDOW_MS } from '../../src/rate-limit.js'
import { PostgresStore } from '../../src/store/postgres.js'
import type { RateWindows } from '../../src/store/store.js'
import { adminQuery, PG_SKIP, PG_URL, pgSchema } from './postgres-helpers.js'

const W = 1000 * WINDOW_MS

/** `count` stores on one new schema, as instances of one service would open it. */
async function instances (t: TestContext, count: number): Promise<{ stores: PostgresStore[], schema: string }> {
  const { url, schema } = await pgSchema(t)
  const stores: PostgresStore[] = []
  for (let i = 0; i < count; i++) stores.push(await PostgresStore.open(url))
  t.after(() => Promise.all(stores.map(store => store.close())))
  return { stores, schema }
}

/** `windows`, counting the syncs it is sent. */
function counted (windows: RateWindows): RateWindows & { syncs: number } {
  const wrapped = {
    syncs: 0,
    sync: (...args: Parameters<RateWindows['sync']>) => { wrapped.syncs++; return windows.sync(...args) },
    others: (...args: Parameters<RateWindows['others']>) => windows.others(...args),
    forget: (before: number) => windows.forget(before)
  }
  return wrapped
}

/** Asks `limiter` about one request of token `id`: 'ok' or the Retry-After seconds. */
function ask (limiter: RateLimiter, id: number): Promise<'ok' | number> {
  return new Promise(resolve => limiter.check(id, retryAfter => resolve(retryAfter ?? 'ok')))
}

if (PG_URL === undefined) {
  test('the rate limit on PostgreSQL', { skip: PG_SKIP }, () => {})
} else {
  test('a sync stores this instance\'s counts and answers per token the window\'s total and the instances seen since `since`', async (t) => {
    const { stores: [store], schema } = await instances(t, 1)
    const windows = store.rateWindows
    assert.deepEqual(await windows.sync('a', W, W - WINDOW_MS, new Map([[7, 5], [8, 1]])), new Map([[7, { total: 5, instances: 1 }], [8, { total: 1, instances: 1 }]]))
    assert.deepEqual(await windows.sync('b', W, W - WINDOW_MS, new Map([[7, 3]])), new Map([[7, { total: 8, instances: 2 }]]))
    assert.deepEqual(await windows.sync('a', W, W - WINDOW_MS, new Map([[7, 4]])), new Map([[7, { total: 8, instances: 2 }]]), 'a late or retried sync lowers nothing')
    await windows.sync('c', W - WINDOW_MS, W - 2 * WINDOW_MS, new Map([[7, 50]]))
    assert.deepEqual(await windows.sync('a', W, W - WINDOW_MS, new Map([[7, 6]])), new Map([[7, { total: 9, instances: 3 }]]), 'c served the token in the window before: an instance, but not in the total')
    // The others' part alone, read: what a sync would add to a's own count, for the tokens others counted.
    assert.deepEqual(await windows.others('a', W, W - WINDOW_MS, [7, 8, 9]), new Map([[7, { total: 3, instances: 3 }]]))
    assert.deepEqual(await windows.others('d', W, W - WINDOW_MS, [7, 8]), new Map([[7, { total: 9, instances: 4 }], [8, { total: 1, instances: 2 }]]))
    assert.deepEqual(await windows.sync('a', W, W, new Map([[7, 6]])), new Map([[7, { total: 9, instances: 2 }]]))
    assert.deepEqual(await windows.sync('d', W, W - WINDOW_MS, new Map()), new Map(), 'nothing to sync, nothing answered')
    await windows.forget(W)
    const { rows } = await adminQuery(`SELECT window_start::text AS start, token_id::int AS id, instance_id AS instance, requests::int AS requests FROM ${schema}.rate_windows ORDER BY 1, 2, 3`)
    assert.deepEqual(rows, [
      { start: String(W), id: 7, instance: 'a', requests: 6 },
      { start: String(W), id: 7, instance: 'b', requests: 3 },
      { start: String(W), id: 8, instance: 'a', requests: 1 }
    ], 'the window before is forgotten')
  })

  test('limiters of two instances on one database: a burst of one token split between them is accepted to the limit and 10% over it at most', async (t) => {
    const { stores } = await instances(t, 2)
    const windows = stores.map(store => counted(store.rateWindows))
    const limiters = windows.map(shared => new RateLimiter({ perMinute: 200, shared, now: () => W + 1000 }))
    t.after(() => limiters.forEach(limiter => limiter.close()))
    const outcomes = await Promise.all(Array.from({ length: 600 }, (_, i) => ask(limiters[i % 2], 7)))
    const accepted = outcomes.filter(outcome => outcome === 'ok').length
    assert.ok(accepted >= 200 && accepted <= 220, `${accepted} accepted`)
    assert.ok(outcomes.every(outcome => outcome === 'ok' || outcome === 59))
    const syncs = windows[0].syncs + windows[1].syncs
    t.diagnostic(`${accepted} accepted of 600 at a limit of 200, ${syncs} syncs`)
    assert.ok(syncs < 600 / 4, `${syncs} syncs for 600 requests`)
  })

  test('far from the limit, thousands of requests on two instances cost a few syncs, not a write each', async (t) => {
    const { stores } = await instances(t, 2)
    const windows = stores.map(store => counted(store.rateWindows))
    const limiters = windows.map(shared => new RateLimiter({ perMinute: 100_000, shared, now: () => W + 1000 }))
    t.after(() => limiters.forEach(limiter => limiter.close()))
    for (let round = 0; round < 4; round++) {
      const outcomes = await Promise.all(Array.from({ length: 1000 }, (_, i) => ask(limiters[i % 2], 7)))
      assert.ok(outcomes.every(outcome => outcome === 'ok'))
      await new Promise(resolve => setTimeout(resolve, 250)) // a sync on each instance's timer
    }
    const syncs = windows[0].syncs + windows[1].syncs
    t.diagnostic(`${syncs} syncs for 4000 requests`)
    assert.ok(syncs <= 16, `${syncs} syncs for 4000 requests`)
    assert.deepEqual(await stores[0].rateWindows.sync('probe', W, W - WINDOW_MS, new Map([[7, 0]])), new Map([[7, { total: 4000, instances: 3 }]]), 'every request counted, in the database')
  })
}
