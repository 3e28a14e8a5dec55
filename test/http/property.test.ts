import fc from 'fast-check'
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, isErrorBody, startServer, testStores } from '../helpers.js'

const INT64_MAX = 2n ** 63n - 1n
const validId = fc.bigInt({ min: -(2n ** 63n), max: INT64_MAX })
const validName = fc.string({ minLength: 1, maxLength: 200 })

/** A JSON value that is not a valid id: wrong type, fractional, or outside int64. */
const invalidId = fc.oneof(
  fc.string(), fc.boolean(), fc.constant(null), fc.double({ noInteger: true }), fc.array(fc.integer(), { maxLength: 3 }), fc.object({ maxDepth: 1 }),
  fc.bigInt({ min: INT64_MAX + 1n, max: 2n ** 80n }), fc.bigInt({ min: -(2n ** 80n), max: -(2n ** 63n) - 1n })
)
const invalidName = fc.oneof(fc.constant(''), fc.string({ minLength: 201, maxLength: 300 }), fc.integer(), fc.constant(null), fc.boolean(), fc.array(fc.string(), { maxLength: 2 }))
const invalidTag = fc.oneof(fc.constant(null), fc.string({ minLength: 101, maxLength: 150 }), fc.integer(), fc.boolean(), fc.object({ maxDepth: 1 }))

/** JSON text with bigints written as plain numbers. */
function toJson (value: unknown): string {
  return JSON.stringify(value, (_key, v) => typeof v === 'bigint' ? `@@${v}@@` : v).replace(/"@@(-?\d+)@@"/g, '$1')
}

/** Bodies that break NewPlant in exactly one way, or are not NewPlant-shaped at all. */
const invalidBody: fc.Arbitrary<string> = fc.oneof(
  fc.record({ id: invalidId, name: validName }).map(toJson),
  fc.record({ id: validId, name: invalidName }).map(toJson),
  fc.record({ id: validId, name: validName, tag: invalidTag }).map(toJson),
  fc.record({ name: validName, tag: fc.string({ maxLength: 100 }) }).map(toJson),
  fc.record({ id: validId }).map(toJson),
  fc.oneof(fc.array(fc.anything({ maxDepth: 1 }), { maxLength: 3 }), fc.string(), fc.integer(), fc.constant(null)).map(toJson),
  fc.string().filter(text => { try { JSON.parse(text); return false } catch { return true } })
)

for (const store of testStores()) {
  describe(store, () => {
    test('1,000 generated invalid bodies: each a 400 Error body, nothing stored, the server stays up', async (t) => {
      const server = await startServer(t, { store })
      const sent: string[] = []
      await fc.assert(fc.asyncProperty(invalidBody, async (raw) => {
        sent.push(raw)
        const answer = await call(server, 'POST', '/plants', { raw, headers: { 'content-type': 'application/json' } })
        assert.ok(isErrorBody(answer, 400), `${raw} -> ${answer.status} ${answer.text}`)
      }), { numRuns: 1000 })
      assert.equal(sent.length >= 1000, true)
      const stored = await call(server, 'GET', '/plants?limit=1')
      assert.deepEqual(stored.body, [], 'no plant was stored')
      assert.equal((await call(server, 'GET', '/healthz', { token: null })).status, 200)
    })
  })
}
