import assert from 'node:assert/strict'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import pino from 'pino'
import { RateLimiter, WINDOW_MS } from '../../src/rate-limit.js'
import type { RateWindows, SharedCount } from '../../src/store/store.js'

/** A moment 15 s into a window. */
const T0 = 1000 * WINDOW_MS + 15_000

/**
 * Shared windows in memory, answering as PostgreSQL does at its slowest to show others' counts:
 * a sync reads the other instances' rows when it begins and stores its own a turn later, so two
 * syncs under way at once do not see each other. `fail` makes syncs throw.
 */
function memoryWindows () {
  const rows = new Map<string, { start: number, id: number, instance: string, requests: number }>()
  const windows = {
    rows,
    syncs: 0,
    starts: [] as number[],
    forgotten: [] as number[],
    fail: undefined as Error | undefined,
    async sync (instance: string, start: number, since: number, counts: Map<number, number>): Promise<Map<number, SharedCount>> {
      windows.syncs++
      windows.starts.push(start)
      if (windows.fail !== undefined) throw windows.fail
      const answers = new Map<number, SharedCount>()
      for (const [id, requests] of counts) {
        const others = [...rows.values()].filter(row => row.id === id && row.instance !== instance && row.start >= since && row.start <= start)
        const total = others.filter(row => row.start === start).reduce((sum, row) => sum + row.requests, 0)
        answers.set(id, { total: total + requests, instances: 1 + new Set(others.map(row => row.instance)).size })
      }
      await new Promise(resolve => setImmediate(resolve))
      for (const [id, requests] of counts) {
        const key = `${start} ${id} ${instance}`
        rows.set(key, { start, id, instance, requests: Math.max(rows.get(key)?.requests ?? 0, requests) })
      }
      return answers
    },
    async others (instance: string, start: number, since: number, ids: number[]): Promise<Map<number, SharedCount>> {
      const answers = new Map<number, SharedCount>()
      for (const id of ids) {
        const others = [...rows.values()].filter(row => row.id === id && row.instance !== instance && row.start >= since && row.start <= start)
        if (others.length === 0) continue
        answers.set(id, { total: others.filter(row => row.start === start).reduce((sum, row) => sum + row.requests, 0), instances: 1 + new Set(others.map(row => row.instance)).size })
      }
      return answers
    },
    async forget (before: number) {
      windows.forgotten.push(before)
    }
  } satisfies RateWindows & Record<string, unknown>
  return windows
}

type Outcome = 'ok' | number

/** One request of token `id`: its outcome if decided at once (else undefined), and a promise of it. */
function ask (limiter: RateLimiter, id: number): { now?: Outcome, later: Promise<Outcome> } {
  let now: Outcome | undefined
  const later = new Promise<Outcome>(resolve => limiter.check(id, retryAfter => {
    now = retryAfter ?? 'ok'
    resolve(now)
  }))
  return { now, later }
}

function limiterOf (t: { after: (fn: () => void) => void }, options: ConstructorParameters<typeof RateLimiter>[0]): RateLimiter {
  const limiter = new RateLimiter({ syncEveryMs: 3_600_000, ...options })
  t.after(() => limiter.close())
  return limiter
}

test('the slice: half of what is left over twice the instances, at most a tenth of the limit between them, at least one', (t) => {
  const limiter = limiterOf(t, { perMinute: 1000 })
  assert.equal(limiter.slice(0, 1), 50)
  assert.equal(limiter.slice(0, 2), 25)
  assert.equal(limiter.slice(0, 5), 10)
  assert.equal(limiter.slice(900, 2), 25, 'a hundred left: the tenth still caps it')
  assert.equal(limiter.slice(960, 2), 10, 'forty left: a quarter each')
  assert.equal(limiter.slice(997, 2), 1, 'three left: one')
  assert.equal(limiter.slice(999, 10), 1, 'never none, or a request under the limit would wait for ever')
  assert.equal(limiterOf(t, { perMinute: 100 }).slice(0, 2), 2)
})

test('alone (SQLite): perMinute requests per token in a fixed window, then 429 with the seconds left; a new window starts afresh', (t) => {
  let now = T0
  const limiter = limiterOf(t, { perMinute: 3, now: () => now })
  assert.deepEqual([1, 2, 3].map(() => ask(limiter, 1).now), ['ok', 'ok', 'ok'], 'decided at once: no promise, no sync')
  assert.equal(ask(limiter, 1).now, 45, '429 with the 45 s left of the window')
  now += 44_001
  assert.equal(ask(limiter, 1).now, 1, 'never 0')
  assert.equal(ask(limiter, 2).now, 'ok', 'another token has its own count')
  now = T0 + 45_000
  assert.equal(ask(limiter, 1).now, 'ok', 'the next window starts at the minute')
})

test('shared: the first request waits for a sync; then a slice goes through at once, without one, and the request past it waits', async (t) => {
  const windows = memoryWindows()
  const limiter = limiterOf(t, { perMinute: 1000, shared: windows, now: () => T0 })
  const first = ask(limiter, 7)
  assert.equal(first.now, undefined, 'nothing known yet of the token')
  assert.equal(await first.later, 'ok')
  assert.equal(windows.syncs, 1)
  // Alone in the windows: a slice of 50, the first request included.
  for (let i = 2; i <= 50; i++) assert.equal(ask(limiter, 7).now, 'ok', `request ${i}`)
  assert.equal(windows.syncs, 1, 'no sync for the slice')
  const past = ask(limiter, 7)
  assert.equal(past.now, undefined)
  assert.equal(await past.later, 'ok')
  assert.equal(windows.syncs, 2)
  assert.equal(windows.rows.get(`${T0 - 15_000} 7 ${limiter.instance}`)?.requests, 50, 'this instance\'s absolute count')
})

test('a request is refused once the counts known reach the limit, other instances\' included, without a sync', async (t) => {
  const windows = memoryWindows()
  windows.rows.set('other', { start: T0 - 15_000, id: 7, instance: 'other', requests: 9 })
  const limiter = limiterOf(t, { perMinute: 10, shared: windows, now: () => T0 })
  assert.equal(await ask(limiter, 7).later, 'ok', 'nine elsewhere, the tenth here')
  assert.equal(ask(limiter, 7).now, 45)
  assert.equal(ask(limiter, 7).now, 45)
  assert.equal(windows.syncs, 1)
})

test('requests waiting for a sync are decided in arrival order when it answers', async (t) => {
  const windows = memoryWindows()
  windows.rows.set('other', { start: T0 - 15_000, id: 7, instance: 'other', requests: 8 })
  const limiter = limiterOf(t, { perMinute: 10, shared: windows, now: () => T0 })
  const asked = [ask(limiter, 7), ask(limiter, 7), ask(limiter, 7), ask(limiter, 7)]
  assert.deepEqual(asked.map(a => a.now), [undefined, undefined, undefined, undefined])
  assert.deepEqual(await Promise.all(asked.map(a => a.later)), ['ok', 'ok', 45, 45])
})

test('a slow stream of exactly perMinute requests alternating between two instances is all accepted; past it, 10% over at most', async (t) => {
  const windows = memoryWindows()
  const limiters = [0, 1].map(() => limiterOf(t, { perMinute: 30, shared: windows, now: () => T0, syncEveryMs: 5 }))
  for (let i = 0; i < 30; i++) {
    assert.equal(await ask(limiters[i % 2], 7).later, 'ok', `request ${i + 1}`)
    await sleep(2)
  }
  let over = 0
  for (let i = 0; i < 10; i++) if (await ask(limiters[i % 2], 7).later === 'ok') over++
  t.diagnostic(`${over} of 10 accepted past the limit`)
  assert.ok(over <= 3, `${over} accepted past the limit`)
})

for (const instances of [2, 3]) {
  test(`a burst of one token across ${instances} instances: at least the limit, at most 10% over it, with far fewer syncs than requests`, async (t) => {
    const windows = memoryWindows()
    const limiters = Array.from({ length: instances }, () => limiterOf(t, { perMinute: 1000, shared: windows, now: () => T0 }))
    const outcomes = await Promise.all(Array.from({ length: 3000 }, (_, i) => ask(limiters[i % instances], 7).later))
    const accepted = outcomes.filter(outcome => outcome === 'ok').length
    t.diagnostic(`${accepted} accepted of 3000 at a limit of 1000, ${windows.syncs} syncs`)
    assert.ok(accepted >= 1000 && accepted <= 1100, `${accepted} accepted`)
    assert.ok(outcomes.every(outcome => outcome === 'ok' || outcome === 45))
    assert.ok(windows.syncs < 300, `${windows.syncs} syncs for 3000 requests`)
  })
}

test('while syncs fail, requests are decided alone, within this instance\'s share of what was left, one warn line a second at most; sharing resumes by itself', async (t) => {
  const lines: Array<{ level: number, msg: string, failures: number }> = []
  const log = pino({ level: 'info' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
  const windows = memoryWindows()
  windows.rows.set('other', { start: T0 - 15_000, id: 7, instance: 'other', requests: 40 })
  const limiter = limiterOf(t, { perMinute: 100, shared: windows, now: () => T0, log, syncEveryMs: 10 })
  assert.equal(await ask(limiter, 7).later, 'ok', 'the first sync: forty counted elsewhere')
  windows.fail = new Error('connect ECONNREFUSED 127.0.0.1:5432')
  const failingSince = performance.now()
  for (let i = 0; i < 20; i++) assert.equal(await ask(limiter, 7).later, 'ok')
  await sleep(300)
  const failed = windows.syncs - 1
  assert.ok(failed >= 5, `${failed} syncs tried on the timer while failing`)
  const warnings = lines.filter(line => line.level === 40)
  assert.ok(warnings.length >= 1 && warnings.length <= 1 + (performance.now() - failingSince) / 1000, `${warnings.length} warn lines for ${failed} failed syncs`)
  assert.match(warnings[0].msg, /counting alone/)
  // Forty known elsewhere, two instances: this one's share of the sixty left is thirty.
  for (let i = 0; i < 9; i++) assert.equal(ask(limiter, 7).now, 'ok', 'alone: no waiting for a sync')
  assert.equal(ask(limiter, 7).now, 45, 'thirty here: the share is used up')
  for (let i = 0; i < 50; i++) assert.equal(ask(limiter, 8).now, 'ok')
  assert.equal(ask(limiter, 8).now, 45, 'a token not synced yet: its share of the limit among the most instances seen')
  windows.fail = undefined
  const row = `${T0 - 15_000} 7 ${limiter.instance}`
  for (let waited = 0; windows.rows.get(row)?.requests !== 30 && waited < 5000; waited += 10) await sleep(10)
  assert.equal(windows.rows.get(row)?.requests, 30, 'the counts made alone are shared once the database is back')
  assert.ok(lines.some(line => line.level === 30 && /again/.test(line.msg)))
})

test('at the minute a new window starts: counts afresh, the token\'s first request needs no sync, and the window before last is forgotten', async (t) => {
  let now = T0
  const windows = memoryWindows()
  const limiter = limiterOf(t, { perMinute: 3, shared: windows, now: () => now })
  assert.equal(await ask(limiter, 7).later, 'ok')
  assert.equal(await ask(limiter, 7).later, 'ok')
  assert.equal(await ask(limiter, 7).later, 'ok')
  assert.equal(ask(limiter, 7).now, 45)
  const syncs = windows.syncs
  now = T0 + 45_000
  assert.equal(ask(limiter, 7).now, 'ok', 'the instance count carries over')
  assert.equal(windows.syncs, syncs)
  assert.equal(await ask(limiter, 7).later, 'ok')
  assert.equal(windows.starts.at(-1), T0 + 45_000, 'counted in the new window')
  assert.deepEqual(windows.forgotten, [T0 - 15_000 - WINDOW_MS, T0 - 15_000], 'once a window')
})

test('a sync slow to commit (a synchronous standby away) holds requests 250 ms, not its deadline: the others\' part is read, and a token new here is decided on it, within its slice', async (t) => {
  const windows = memoryWindows()
  let finish = (): void => {}
  const hung = new Promise<void>(resolve => { finish = resolve })
  const sync = windows.sync
  windows.sync = async (...args) => { await hung; return await sync(...args) }
  const limiter = limiterOf(t, { perMinute: 100, shared: windows, now: () => T0 })
  const started = performance.now()
  const asked = Array.from({ length: 10 }, () => ask(limiter, 1))
  assert.ok(asked.every(request => request.now === undefined), 'a token new to this instance waits for a sync')
  const within = await Promise.race([Promise.all(asked.slice(0, 5).map(request => request.later)), sleep(2000).then(() => 'still waiting')])
  assert.deepEqual(within, ['ok', 'ok', 'ok', 'ok', 'ok'], 'its slice: 100 over 10, over twice one instance')
  const waited = performance.now() - started
  assert.ok(waited >= 200 && waited < 1000, `decided after ${waited.toFixed(0)} ms`)
  let settled = 0
  for (const request of asked.slice(5)) request.later.then(() => { settled++ }, () => {})
  await sleep(100)
  assert.equal(settled, 0, 'past the slice, requests wait for the sync')
  finish()
  assert.deepEqual(await Promise.all(asked.slice(5).map(request => request.later)), ['ok', 'ok', 'ok', 'ok', 'ok'], 'and are decided by it')
})

test('fresh instances whose syncs are slow keep the service within a tenth over the limit: each takes its slice before the sync, not the whole limit', async (t) => {
  for (const delay of [100, 300, 1000]) {
    const windows = memoryWindows()
    const sync = windows.sync
    windows.sync = async (...args) => { await sleep(delay); return await sync(...args) }
    const limiters = [limiterOf(t, { perMinute: 100, shared: windows, now: () => T0 }), limiterOf(t, { perMinute: 100, shared: windows, now: () => T0 })]
    const outcomes = await Promise.all(limiters.flatMap(limiter => Array.from({ length: 150 }, () => ask(limiter, 1).later)))
    const accepted = outcomes.filter(outcome => outcome === 'ok').length
    assert.ok(accepted >= 100 && accepted <= 110, `syncs of ${delay} ms: ${accepted} accepted of a limit of 100`)
  }
})

/** `windows` whose syncs wait for the returned `finish` (a commit waiting for an absent standby), or fail when it is given an error. */
function hangingSyncs (windows: ReturnType<typeof memoryWindows>): (error?: Error) => void {
  let finish: (error?: Error) => void = () => {}
  const hung = new Promise<void>((resolve, reject) => { finish = error => { if (error === undefined) resolve(); else reject(error) } })
  const sync = windows.sync
  windows.sync = async (...args) => { await hung; return await sync(...args) }
  return error => { finish(error) }
}

test('while a sync is slow, a token new here is decided on what the other instances counted: their total and their number set its slice', async (t) => {
  const windows = memoryWindows()
  // Another instance has counted 95 of the 100 in this window.
  const start = T0 - (T0 % WINDOW_MS)
  windows.rows.set(`${start} 1 other`, { start, id: 1, instance: 'other', requests: 95 })
  const finish = hangingSyncs(windows)
  const limiter = limiterOf(t, { perMinute: 100, shared: windows, now: () => T0 })
  let decided = 0
  const asked = Array.from({ length: 10 }, () => ask(limiter, 1))
  for (const request of asked) request.later.then(() => { decided++ }, () => {})
  await sleep(600)
  // 5 left over two instances: a slice of 1 (with the others' count ignored, or one instance, 2).
  assert.equal(decided, 1, 'one request, its slice; the rest wait for the sync')
  finish()
  const outcomes = await Promise.all(asked.map(request => request.later))
  assert.equal(outcomes.filter(outcome => outcome === 'ok').length, 5, 'then the sync decides: 5 more fit under the limit')
})

test('a slow sync that then fails leaves a token new here counting alone with as many instances as served any token, not with one', async (t) => {
  const windows = memoryWindows()
  const start = T0 - (T0 % WINDOW_MS)
  // Five instances served token 1: this one learns so from its first sync.
  for (const instance of ['b', 'c', 'd', 'e']) windows.rows.set(`${start} 1 ${instance}`, { start, id: 1, instance, requests: 1 })
  const limiter = limiterOf(t, { perMinute: 100, shared: windows, now: () => T0 })
  assert.equal(await ask(limiter, 1).later, 'ok')
  const fail = hangingSyncs(windows)
  const asked = Array.from({ length: 100 }, () => ask(limiter, 2))
  await sleep(400) // the peek finds no one else on token 2: their first syncs may be stuck as well
  fail(new Error('the standby is away'))
  const outcomes = await Promise.all(asked.map(request => request.later))
  const accepted = outcomes.filter(outcome => outcome === 'ok').length
  assert.ok(accepted <= 20, `${accepted} accepted alone: a fifth of the limit at most`)
})
