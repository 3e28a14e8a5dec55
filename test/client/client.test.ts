// The client against the real server over HTTP, on SQLite and, with TEST_DATABASE_URL, on PostgreSQL.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { createClient, PlantstoreError, type PlantstoreClient, type PlantRecord } from '../../src/client/index.js'
import { startServer } from '../helpers.js'
import { refusal } from './refusal.js'
import { PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
const BEYOND_DOUBLES = 2n ** 53n // ids from here on are not all numbers: 2^53 + 1 is none

/** Asserts a refusal carrying the server's Error body: `error` equal to the status, and a sentence. */
async function refusedWith (promise: Promise<unknown>, status: number): Promise<PlantstoreError> {
  const error = await refusal(promise)
  assert.equal(error.status, status, error.message)
  assert.equal(error.body?.error, status)
  assert.ok(error.message.length > 0 && error.message === error.body.message)
  return error
}

/** A server on a fresh store of the kind `store` names, and a client with its token; `counted` counts requests. */
async function serve (t: TestContext, store: 'SQLite' | 'PostgreSQL', env: NodeJS.ProcessEnv = {}): Promise<{ client: PlantstoreClient, url: string, token: string, requests: () => number }> {
  const database = store === 'PostgreSQL' ? { DATABASE_URL: (await pgSchema(t)).url } : {}
  const server = await startServer(t, { env: { ...database, ...env } })
  let requests = 0
  const client = createClient({ baseUrl: server.url, token: server.token, fetch: async (...args) => { requests++; return await fetch(...args) } })
  return { client, url: server.url, token: server.token, requests: () => requests }
}

const ids = (plants: PlantRecord[]): bigint[] => plants.map(plant => plant.id)

async function collect<T> (iterator: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = []
  for await (const item of iterator) all.push(item)
  return all
}

for (const store of ['SQLite', 'PostgreSQL'] as const) {
  if (store === 'PostgreSQL' && PG_URL === undefined) {
    test('the client on PostgreSQL', { skip: PG_SKIP }, () => {})
    continue
  }

  test(`the client on ${store}: plants one at a time`, async (t) => {
    const { client, url, requests } = await serve(t, store)

    await t.test('ids go in and come out as bigints, exact at the int64 extremes and past 2^53', async () => {
      const extremes = [INT64_MIN, INT64_MIN + 1n, -BEYOND_DOUBLES - 1n, -1n, 0n, 1n, BEYOND_DOUBLES, BEYOND_DOUBLES + 1n, INT64_MAX - 1n, INT64_MAX]
      for (const id of extremes) {
        assert.deepEqual(await client.createPlant({ id, name: `n${id}` }), { name: `n${id}` }, 'the seed\'s Plant: no id')
        const read = await client.getPlant(id)
        assert.equal(typeof read.id, 'bigint')
        assert.deepEqual(read, { id, name: `n${id}` })
      }
      const page = await client.listPlants({ limit: 1000 })
      assert.deepEqual(ids(page.plants), extremes)
      assert.equal(page.next, undefined)
    })

    await t.test('createPlant: the same plant again answers the same; other data under its id is a 409, and nothing changes', async () => {
      const fern = { id: 7n, name: 'Fern 🌿', tag: 'shade' }
      assert.deepEqual(await client.createPlant(fern), { name: 'Fern 🌿', tag: 'shade' })
      assert.deepEqual(await client.createPlant(fern), { name: 'Fern 🌿', tag: 'shade' }, 'a safe retry')
      const conflict = await refusedWith(client.createPlant({ id: 7n, name: 'Fern 🌿' }), 409)
      assert.equal(conflict.retryAfter, undefined)
      await refusedWith(client.createPlant({ id: 7n, name: 'Moss', tag: 'shade' }), 409)
      assert.deepEqual(await client.getPlant(7n), fern)
    })

    await t.test('replacePlant sets name and tag and removes an omitted tag; deletePlant deletes', async () => {
      await client.createPlant({ id: INT64_MAX - 7n, name: 'Ivy', tag: 'climber' })
      assert.deepEqual(await client.replacePlant(INT64_MAX - 7n, { name: 'Ivy', tag: 'shade' }), { id: INT64_MAX - 7n, name: 'Ivy', tag: 'shade' })
      assert.deepEqual(await client.replacePlant(INT64_MAX - 7n, { name: 'English ivy' }), { id: INT64_MAX - 7n, name: 'English ivy' })
      assert.deepEqual(await client.getPlant(INT64_MAX - 7n), { id: INT64_MAX - 7n, name: 'English ivy' })
      assert.equal(await client.deletePlant(INT64_MAX - 7n), undefined)
      await refusedWith(client.getPlant(INT64_MAX - 7n), 404)
    })

    await t.test('an unknown id is a 404 for getPlant, replacePlant and deletePlant', async () => {
      await refusedWith(client.getPlant(-42n), 404)
      await refusedWith(client.replacePlant(-42n, { name: 'Moss' }), 404)
      await refusedWith(client.deletePlant(-42n), 404)
    })

    await t.test('a plant the server refuses is a 400 with its Error body, naming the field', async () => {
      const error = await refusedWith(client.createPlant({ id: 8n, name: '' }), 400)
      assert.match(error.message, /name/)
      await refusedWith(client.replacePlant(7n, { name: 'x'.repeat(201) }), 400)
    })

    await t.test('a number is refused as an id before anything is sent: it may already have lost digits', async () => {
      const before = requests()
      const rounded = 2 ** 53 + 1 as unknown as bigint // 9007199254740992: the id the caller meant is gone
      await assert.rejects(client.getPlant(rounded), TypeError)
      await assert.rejects(client.createPlant({ id: 1 as unknown as bigint, name: 'Fern' }), /must be a bigint \(1n\)/)
      await assert.rejects(client.listPlants({ after: 1 as unknown as bigint }), TypeError)
      assert.equal(requests(), before)
    })

    await t.test('a bad token is a 401 with the Error body', async () => {
      const stranger = createClient({ baseUrl: url, token: 'pst_not-a-token' })
      await refusedWith(stranger.getPlant(7n), 401)
      await refusedWith(stranger.createPlant({ id: 9n, name: 'Moss' }), 401)
    })
  })

  test(`the client on ${store}: pages, following Link beyond 2^53`, async (t) => {
    const { client, requests } = await serve(t, store)
    const all = Array.from({ length: 251 }, (_, i) => BEYOND_DOUBLES + BigInt(i))
    const ferns = all.filter(id => id % 3n === 0n)
    for (let i = 0; i < all.length; i += 25) {
      await Promise.all(all.slice(i, i + 25).map(id => client.createPlant({ id, name: `p${id}`, ...(ferns.includes(id) && { tag: 'fern' }) })))
    }

    await t.test('plants() follows every page: all 251 ids, exact and in order, in three requests of 100', async () => {
      const before = requests()
      const plants = await collect(client.plants({ limit: 100 }))
      assert.deepEqual(ids(plants), all)
      assert.equal(requests() - before, 3)
    })

    await t.test('listPlants gives the next page\'s query from Link, its after exact', async () => {
      const first = await client.listPlants({ limit: 100 })
      assert.deepEqual(first.next, { limit: 100, after: BEYOND_DOUBLES + 99n })
      const second = await client.listPlants(first.next)
      assert.equal(second.plants[0].id, BEYOND_DOUBLES + 100n)
      const last = await client.listPlants({ after: BEYOND_DOUBLES + 200n })
      assert.deepEqual(ids(last.plants), all.slice(201))
      assert.equal(last.next, undefined)
    })

    await t.test('the tag filter holds from page to page', async () => {
      assert.deepEqual(ids(await collect(client.plants({ tag: 'fern', limit: 7 }))), ferns)
      assert.deepEqual(await collect(client.plants({ tag: 'none' })), [])
    })

    await t.test('paging ends at the top of the int64 range', async () => {
      for (const id of [INT64_MAX - 2n, INT64_MAX - 1n, INT64_MAX]) await client.createPlant({ id, name: 'top' })
      const first = await client.listPlants({ after: INT64_MAX - 3n, limit: 2 })
      assert.deepEqual(first.next, { limit: 2, after: INT64_MAX - 1n })
      assert.deepEqual(ids(await collect(client.plants({ after: INT64_MAX - 3n, limit: 2 }))), [INT64_MAX - 2n, INT64_MAX - 1n, INT64_MAX])
      // A full page ending at the largest id has no next page: nothing can follow it.
      const full = await client.listPlants({ after: INT64_MAX - 2n, limit: 2 })
      assert.deepEqual(ids(full.plants), [INT64_MAX - 1n, INT64_MAX])
      assert.equal(full.next, undefined)
    })
  })
}

test('a rate-limited request is a 429 carrying Retry-After in seconds', async (t) => {
  const { client } = await serve(t, 'SQLite', { RATE_LIMIT_PER_MINUTE: '1' })
  await refusedWith(client.getPlant(1n), 404)
  const limited = await refusedWith(client.getPlant(1n), 429)
  assert.ok(limited.retryAfter !== undefined && limited.retryAfter >= 1 && limited.retryAfter <= 60, String(limited.retryAfter))
})
