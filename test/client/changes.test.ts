// The client's change feed and conditional requests, against the real server over HTTP.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ChangesGoneError, createClient, type Change, type PlantstoreClient } from '../../src/client/index.js'
import { startServer, testStores } from '../helpers.js'
import { refusal } from './refusal.js'

const BIG = 2n ** 63n - 1n

/** Takes `count` changes from the iterator, failing after `ms`. */
async function take (changes: AsyncIterator<Change>, count: number, ms = 10_000): Promise<Change[]> {
  const taken: Change[] = []
  const deadline = Date.now() + ms
  while (taken.length < count) {
    const left = deadline - Date.now()
    const next = await Promise.race([changes.next(), new Promise<'late'>(resolve => setTimeout(() => resolve('late'), Math.max(0, left)))])
    assert.notEqual(next, 'late', `${taken.length} of ${count} changes within ${ms} ms`)
    if (next === 'late' || next.done === true) break
    taken.push(next.value)
  }
  return taken
}

for (const store of testStores()) {
  test(`${store}: changes() yields every change in order, exact, filtered by tag; the conditional options`, async (t) => {
    const server = await startServer(t, { store })
    const client: PlantstoreClient = createClient({ baseUrl: server.url, token: server.token })
    const controller = new AbortController()
    t.after(() => controller.abort())
    const all = client.changes({ wait: 5, signal: controller.signal })[Symbol.asyncIterator]()
    const tagged = client.changes({ tag: 'shade', wait: 5, limit: 1, signal: controller.signal })[Symbol.asyncIterator]()

    await client.createPlant({ id: BIG, name: 'Fern', tag: 'shade' }, { ifNoneMatch: '*' })
    await client.createPlant({ id: 1n, name: 'Moss' })
    const { etag } = await client.replaceVersioned(BIG, { name: 'Fern' })
    assert.equal(etag, '"3"')
    await client.deletePlant(1n, { ifMatch: '"2"' })

    const changes = await take(all, 4)
    assert.deepEqual(changes.map(({ position, type, id, plant }) => ({ position, type, id, plant })), [
      { position: 1n, type: 'plant.created', id: BIG, plant: { id: BIG, name: 'Fern', tag: 'shade' } },
      { position: 2n, type: 'plant.created', id: 1n, plant: { id: 1n, name: 'Moss' } },
      { position: 3n, type: 'plant.updated', id: BIG, plant: { id: BIG, name: 'Fern' } },
      { position: 4n, type: 'plant.deleted', id: 1n, plant: { id: 1n, name: 'Moss' } }
    ])
    assert.ok(changes.every(change => change.at instanceof Date && !Number.isNaN(change.at.getTime())))
    assert.deepEqual((await take(tagged, 2)).map(change => change.position), [1n, 3n], 'the tag removed by 3 still shows')

    const versioned = await client.getVersioned(BIG)
    assert.deepEqual(versioned, { plant: { id: BIG, name: 'Fern' }, etag: '"3"' })
    assert.equal(await client.getVersioned(BIG, { ifNoneMatch: '"3"' }), 'not-modified')
    assert.equal((await refusal(client.replacePlant(BIG, { name: 'Stale' }, { ifMatch: '"1"' }))).status, 412)
    assert.equal((await refusal(client.deletePlant(BIG, { ifMatch: '"1"' }))).status, 412)
    assert.equal((await refusal(client.createPlant({ id: BIG, name: 'Fern' }, { ifNoneMatch: '*' }))).status, 412)
    assert.deepEqual(await client.replacePlant(BIG, { name: 'Matched' }, { ifMatch: '"3"' }), { id: BIG, name: 'Matched' })
    assert.deepEqual((await take(all, 1)).map(change => [change.position, change.plant.name]), [[5n, 'Matched']], 'the iterator follows on')
  })
}

test('changes() resumes across a server restart from the last position it yielded, missing none and repeating none', { timeout: 30_000 }, async (t) => {
  const first = await startServer(t)
  let server = first
  // The client's fetch goes wherever the server now listens: a restart may take another port.
  const client = createClient({ baseUrl: 'http://plantstore.invalid', token: first.token, fetch: async (input, init) => await fetch(String(input).replace('http://plantstore.invalid', server.url), init) })
  const controller = new AbortController()
  t.after(() => controller.abort())
  const changes = client.changes({ wait: 2, signal: controller.signal })[Symbol.asyncIterator]()
  for (let id = 1n; id <= 3n; id++) await client.createPlant({ id, name: `p${id}` })
  assert.deepEqual((await take(changes, 3)).map(change => change.position), [1n, 2n, 3n])
  server.process.kill('SIGKILL')
  await server.exited
  server = await startServer(t, { dir: first.dir, token: first.token })
  for (let id = 4n; id <= 6n; id++) await client.createPlant({ id, name: `p${id}` })
  assert.deepEqual((await take(changes, 3, 15_000)).map(change => change.position), [4n, 5n, 6n])
})

test('changes() surfaces a position the log no longer holds as ChangesGoneError (410)', async (t) => {
  const server = await startServer(t)
  const client = createClient({ baseUrl: server.url, token: server.token })
  const error = await refusal((async () => { for await (const change of client.changes({ after: 99n })) assert.fail(`no change expected: ${change.position}`) })())
  assert.ok(error instanceof ChangesGoneError, String(error))
  assert.equal(error.status, 410)
  assert.equal(error.body?.error, 410)
})
