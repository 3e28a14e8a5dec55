// The client's change feed and conditional requests, against the real server over HTTP: on
// SQLite and, with TEST_DATABASE_URL, on PostgreSQL.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import { ChangesGoneError, createClient, PlantstoreError, type Change, type ChangesQuery, type PlantstoreClient } from '../../src/client/index.js'
import { startServer, testStores, type Server } from '../helpers.js'
import { refusal } from './refusal.js'

const BIG = 2n ** 63n - 1n
const PAST_DOUBLES = 2n ** 53n + 1n // not a double: a number would turn it into 2^53

/** Takes `count` changes from the iterator, failing after `ms`. */
async function take (changes: AsyncIterator<Change>, count: number, ms = 10_000): Promise<Change[]> {
  const taken: Change[] = []
  const deadline = Date.now() + ms
  while (taken.length < count) {
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<'late'>(resolve => { timer = setTimeout(() => resolve('late'), Math.max(0, deadline - Date.now())) })
    const next = await Promise.race([changes.next(), late]).finally(() => clearTimeout(timer))
    assert.notEqual(next, 'late', `${taken.length} of ${count} changes within ${ms} ms`)
    if (next === 'late' || next.done === true) break
    taken.push(next.value)
  }
  return taken
}

/** The iterator of `client.changes(query)`, stopped by its signal after the test. */
function follow (t: TestContext, client: PlantstoreClient, query: Omit<ChangesQuery, 'signal'> = {}): { changes: AsyncIterator<Change>, stop: AbortController } {
  const stop = new AbortController()
  t.after(() => stop.abort())
  return { changes: client.changes({ ...query, signal: stop.signal })[Symbol.asyncIterator](), stop }
}

const positions = (changes: Change[]): bigint[] => changes.map(change => change.position)

type Fault = 'pass' | 'network' | 'cut' | 'empty' | { status: number, retryAfter?: string }

/**
 * A fetch to `server` that answers the feed's requests with `faults` in turn, then passes them on:
 * 'pass' passes one on, 'network' fails as fetch does when the connection is refused or lost, 'cut' loses the connection
 * midway through the server's real answer, 'empty' answers an empty page at once (nothing after
 * its `after`, as a proxy that does not hold a long poll might), a status answers it (with Retry-After if given).
 * `requests` holds each feed request's `after` and when it was sent.
 */
function faulty (server: () => Server, faults: Fault[] = []): { fetch: typeof fetch, requests: Array<{ after: string | null, at: number }> } {
  const requests: Array<{ after: string | null, at: number }> = []
  return {
    requests,
    fetch: async (input, init) => {
      const url = String(input).replace('http://plantstore.invalid', server().url)
      if (new URL(url).pathname !== '/plants/changes') return await fetch(url, init)
      requests.push({ after: new URL(url).searchParams.get('after'), at: performance.now() })
      const fault = faults.shift()
      if (fault === undefined || fault === 'pass') return await fetch(url, init)
      if (fault === 'network') throw new TypeError('fetch failed')
      if (fault === 'empty') return new Response('[]', { status: 200, headers: { 'content-type': 'application/json', link: `</plants/changes?after=${new URL(url).searchParams.get('after') ?? 0}>; rel="next"` } })
      if (fault === 'cut') {
        const real = await fetch(url, init)
        const bytes = new Uint8Array(await real.arrayBuffer())
        const body = new ReadableStream<Uint8Array>({
          start (controller) {
            controller.enqueue(bytes.subarray(0, bytes.length >> 1))
            controller.error(new TypeError('terminated'))
          }
        })
        return new Response(body, { status: real.status, headers: real.headers })
      }
      const headers: Record<string, string> = fault.retryAfter === undefined ? {} : { 'retry-after': fault.retryAfter }
      // A gateway's page is not JSON; the service's own refusals are.
      return fault.status === 502
        ? new Response('<html>Bad Gateway</html>', { status: 502, headers: { ...headers, 'content-type': 'text/html' } })
        : new Response(JSON.stringify({ error: fault.status, message: 'Not now.' }), { status: fault.status, headers: { ...headers, 'content-type': 'application/json' } })
    }
  }
}

for (const store of testStores()) {
  test(`${store}: changes() yields every change in order, ids exact past 2^53, filtered by tag; the conditional options`, async (t) => {
    const server = await startServer(t, { store })
    const client: PlantstoreClient = createClient({ baseUrl: server.url, token: server.token })
    const { changes: all } = follow(t, client, { wait: 5 })
    const { changes: tagged } = follow(t, client, { tag: 'shade', wait: 5, limit: 1 })

    assert.deepEqual(await client.createVersioned({ id: BIG, name: 'Fern', tag: 'shade' }, { ifNoneMatch: '*' }), { plant: { id: BIG, name: 'Fern', tag: 'shade' }, etag: '"1"' })
    assert.deepEqual(await client.createPlant({ id: PAST_DOUBLES, name: 'Moss' }), { name: 'Moss' })
    const { etag } = await client.replaceVersioned(BIG, { name: 'Fern' })
    assert.equal(etag, '"3"')
    await client.deletePlant(PAST_DOUBLES, { ifMatch: '"2"' })

    const changes = await take(all, 4)
    assert.deepEqual(changes.map(({ position, type, id, plant }) => ({ position, type, id, plant })), [
      { position: 1n, type: 'plant.created', id: BIG, plant: { id: BIG, name: 'Fern', tag: 'shade' } },
      { position: 2n, type: 'plant.created', id: PAST_DOUBLES, plant: { id: PAST_DOUBLES, name: 'Moss' } },
      { position: 3n, type: 'plant.updated', id: BIG, plant: { id: BIG, name: 'Fern' } },
      { position: 4n, type: 'plant.deleted', id: PAST_DOUBLES, plant: { id: PAST_DOUBLES, name: 'Moss' } }
    ])
    assert.ok(changes.every(change => change.at instanceof Date && !Number.isNaN(change.at.getTime())))
    assert.deepEqual(positions(await take(tagged, 2)), [1n, 3n], 'the tag removed by 3 still shows')

    assert.deepEqual(await client.getVersioned(BIG), { plant: { id: BIG, name: 'Fern' }, etag: '"3"' })
    assert.equal(await client.getVersioned(BIG, { ifNoneMatch: '"3"' }), 'not-modified')
    assert.deepEqual(await client.getVersioned(BIG, { ifNoneMatch: '"1"' }), { plant: { id: BIG, name: 'Fern' }, etag: '"3"' }, 'a stale copy gets the plant')
    assert.equal((await refusal(client.replacePlant(BIG, { name: 'Stale' }, { ifMatch: '"1"' }))).status, 412)
    assert.equal((await refusal(client.replaceVersioned(BIG, { name: 'Stale' }, { ifMatch: '"1", "2"' }))).status, 412)
    assert.equal((await refusal(client.deletePlant(BIG, { ifMatch: '"1"' }))).status, 412)
    assert.equal((await refusal(client.createPlant({ id: BIG, name: 'Fern' }, { ifNoneMatch: '*' }))).status, 412)
    assert.equal((await refusal(client.replacePlant(BIG, { name: 'Exists' }, { ifNoneMatch: '*' }))).status, 412)
    assert.equal((await refusal(client.deletePlant(BIG, { ifNoneMatch: '"3"' }))).status, 412)
    assert.equal((await refusal(client.getVersioned(BIG, { ifMatch: '"1"' }))).status, 412)
    assert.deepEqual(await client.getPlant(BIG), { id: BIG, name: 'Fern' }, 'nothing changed')
    assert.deepEqual(await client.replacePlant(BIG, { name: 'Matched' }, { ifMatch: '"3"' }), { id: BIG, name: 'Matched' })
    assert.deepEqual((await take(all, 1)).map(change => [change.position, change.plant.name]), [[5n, 'Matched']], 'the iterator follows on, 412s logged nothing')
  })

  test(`${store}: changes() resumes across a server restart (SIGKILL mid long poll) after the last position it read, missing none and repeating none`, { timeout: 30_000 }, async (t) => {
    const first = await startServer(t, { store })
    let server = first
    // The client's fetch goes wherever the server now listens: a restart may take another port.
    const { fetch: fetchFunction, requests } = faulty(() => server)
    const client = createClient({ baseUrl: 'http://plantstore.invalid', token: first.token, fetch: fetchFunction })
    const { changes } = follow(t, client, { after: 0n, wait: 5, limit: 2 })
    for (let id = 1n; id <= 3n; id++) await client.createPlant({ id: PAST_DOUBLES + id, name: `p${id}` })
    assert.deepEqual(positions(await take(changes, 3)), [1n, 2n, 3n])
    const pending = changes.next() // a long poll after 3, in flight when the server dies
    await delay(300)
    server.process.kill('SIGKILL')
    await server.exited
    server = await startServer(t, { dir: first.dir, databaseUrl: first.databaseUrl, token: first.token })
    for (let id = 4n; id <= 7n; id++) await client.createPlant({ id: PAST_DOUBLES + id, name: `p${id}` })
    const next = await pending
    assert.equal(next.done, false)
    const resumed = [next.value as Change, ...await take(changes, 3, 15_000)]
    assert.deepEqual(resumed.map(change => [change.position, change.id]), [4n, 5n, 6n, 7n].map(position => [position, PAST_DOUBLES + position]))
    const afters = requests.map(request => BigInt(request.after ?? -1))
    assert.ok(afters.filter(after => after === 3n).length >= 2, `it asked after 3 again, until the new server answered: ${afters.join()}`)
    assert.ok(afters.every((after, i) => i === 0 || after >= afters[i - 1]), `and never went back: ${afters.join()}`)
  })

  test(`${store}: a position the log no longer holds is a ChangesGoneError (410): beyond the head, and past retention`, { timeout: 20_000 }, async (t) => {
    const server = await startServer(t, { store, env: { CHANGES_RETENTION: '1s' } })
    const client = createClient({ baseUrl: server.url, token: server.token })
    const beyond = await refusal(take(client.changes({ after: 99n })[Symbol.asyncIterator](), 1))
    assert.ok(beyond instanceof ChangesGoneError, String(beyond))
    assert.equal(beyond.status, 410)
    assert.equal(beyond.body?.error, 410)

    const { changes } = follow(t, client, { after: 0n, limit: 1, wait: 1 })
    await client.createPlant({ id: 1n, name: 'Fern' })
    await client.createPlant({ id: 2n, name: 'Moss' })
    assert.deepEqual(positions(await take(changes, 1)), [1n])
    await delay(2500) // past the 1 s retention and a prune (every 100 ms)
    const behind = await refusal(changes.next())
    assert.ok(behind instanceof ChangesGoneError, `a follower left behind: ${String(behind)}`)
    assert.ok((await refusal(take(client.changes({ after: 0n })[Symbol.asyncIterator](), 1))) instanceof ChangesGoneError, 'after=0 once the log is pruned')
    const listed = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${server.token}` } })
    assert.equal(listed.headers.get('changes-position'), '2', 'list again, then follow from Changes-Position')
  })
}

test('changes() waits out network failures, a cut answer, 502, 503 and 429 (their Retry-After), resuming after the last position read', { timeout: 20_000 }, async (t) => {
  const server = await startServer(t)
  const { fetch: fetchFunction, requests } = faulty(() => server, [
    'pass', 'network', { status: 503, retryAfter: '1' }, 'cut', { status: 502 }, { status: 429, retryAfter: '1' }
  ])
  const client = createClient({ baseUrl: server.url, token: server.token, fetch: fetchFunction })
  for (let id = 1n; id <= 3n; id++) await client.createPlant({ id: PAST_DOUBLES + id, name: `p${id}` })
  const { changes } = follow(t, client, { after: 0n, limit: 2, wait: 1 })
  assert.deepEqual(positions(await take(changes, 2)), [1n, 2n], 'a page of 2')
  // The next page (3) is lost five ways before it arrives; the answer cut midway counts for nothing.
  assert.deepEqual(positions(await take(changes, 1, 15_000)), [3n])
  assert.deepEqual(requests.map(request => request.after), ['0', '2', '2', '2', '2', '2', '2'], 'five failures, then the answer: each asked after 2')
  const gap = (i: number): number => requests[i].at - requests[i - 1].at
  assert.ok(gap(3) >= 950, `503's Retry-After: 1 waited (${gap(3)} ms)`)
  assert.ok(gap(6) >= 950, `429's Retry-After: 1 waited (${gap(6)} ms)`)
  assert.ok(gap(2) < 1000 && gap(4) < 1500 && gap(5) < 2500, `without Retry-After, a short pause: ${[2, 4, 5].map(gap).join(', ')} ms`)

  await client.createPlant({ id: PAST_DOUBLES + 4n, name: 'p4' })
  assert.deepEqual(positions(await take(changes, 1)), [4n], 'and on, nothing repeated')
})

test('changes() with a tag moves on past the changes it does not show, following Link', async (t) => {
  const server = await startServer(t)
  const { fetch: fetchFunction, requests } = faulty(() => server)
  const client = createClient({ baseUrl: server.url, token: server.token, fetch: fetchFunction })
  const { changes } = follow(t, client, { after: 0n, tag: 'shade', wait: 1 })
  const first = changes.next()
  for (let id = 1n; id <= 3n; id++) await client.createPlant({ id, name: `p${id}` })
  await delay(1500) // the first long poll ends empty: it read 1 to 3 and showed none
  await client.createPlant({ id: PAST_DOUBLES, name: 'Fern', tag: 'shade' })
  const next = await first
  assert.deepEqual(next.done === false && [next.value.position, next.value.id], [4n, PAST_DOUBLES])
  assert.equal(requests[0].after, '0')
  assert.equal(requests[1].after, '3', 'the empty page\'s Link said after=3')
})

test('changes() with wait: 0 polls once a second at the head, not in a busy loop', async (t) => {
  const server = await startServer(t)
  const { fetch: fetchFunction, requests } = faulty(() => server)
  const client = createClient({ baseUrl: server.url, token: server.token, fetch: fetchFunction })
  const { changes } = follow(t, client, { wait: 0 })
  const first = changes.next()
  await delay(1500)
  assert.ok(requests.length >= 1 && requests.length <= 3, `${requests.length} requests in 1.5 s`)
  await client.createPlant({ id: PAST_DOUBLES, name: 'Fern' })
  const next = await first
  assert.deepEqual(next.done === false && next.value.id, PAST_DOUBLES)
})

test('changes() whose long poll comes back empty at once (not held: a proxy, a stopping server) asks again a second later, not in a busy loop', async (t) => {
  const server = await startServer(t)
  const { fetch: fetchFunction, requests } = faulty(() => server, Array.from({ length: 50 }, () => 'empty'))
  const client = createClient({ baseUrl: server.url, token: server.token, fetch: fetchFunction })
  const { changes } = follow(t, client, { wait: 30 })
  const first = changes.next()
  await delay(1500)
  assert.ok(requests.length >= 1 && requests.length <= 3, `${requests.length} requests in 1.5 s`)
  assert.deepEqual(new Set(requests.map(request => request.after)), new Set([null, '0']), 'each from where it stood')
  first.catch(() => {})
})

test('changes() ends at once when its signal aborts: mid long poll, mid Retry-After', async (t) => {
  const server = await startServer(t)
  for (const faults of [[], [{ status: 503, retryAfter: '30' }]]) {
    const { fetch: fetchFunction, requests } = faulty(() => server, faults)
    const { changes, stop } = follow(t, createClient({ baseUrl: server.url, token: server.token, fetch: fetchFunction }), { wait: 30 })
    const pending = changes.next()
    await delay(300)
    const aborted = performance.now()
    stop.abort()
    assert.deepEqual(await pending, { done: true, value: undefined })
    assert.ok(performance.now() - aborted < 1000, `${faults.length === 0 ? 'long poll' : 'pause'} ended in ${performance.now() - aborted} ms`)
    assert.equal(requests.length, 1)
  }
})

test('changes() throws, without retrying, what waiting will not mend: 401, a number as position, a bad baseUrl', async (t) => {
  const server = await startServer(t)
  const { fetch: fetchFunction, requests } = faulty(() => server)
  const stranger = createClient({ baseUrl: server.url, token: 'pst_not-a-token', fetch: fetchFunction })
  const error = await refusal(take(stranger.changes({ wait: 1 })[Symbol.asyncIterator](), 1))
  assert.ok(!(error instanceof ChangesGoneError) && error instanceof PlantstoreError && error.status === 401, String(error))
  assert.equal(requests.length, 1)
  const client = createClient({ baseUrl: server.url, token: server.token })
  await assert.rejects(client.changes({ after: 2 ** 53 + 1 as unknown as bigint }).next(), /A position must be a bigint/)
  await assert.rejects(createClient({ baseUrl: 'not a url', token: server.token }).changes().next(), TypeError)
})
