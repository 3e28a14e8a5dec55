// The store contract: the same behaviours, run on SQLite always and on PostgreSQL when
// TEST_DATABASE_URL names a server (each test in a schema of its own).
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { StoreUnavailableError } from '../../src/errors.js'
import type { NewToken, Store } from '../../src/store/store.js'
import { testStores } from '../helpers.js'
import { openTestStore, plantOf } from '../stored.js'

function token (name: string, options: Partial<NewToken> = {}): NewToken {
  return { name, digest: Buffer.from(name.padEnd(32, '#')), scopes: ['plants:read', 'plants:write'], ...options }
}

const INT64_MIN = -9223372036854775808n
const INT64_MAX = 9223372036854775807n

for (const kind of testStores()) {
  const open = async (t: TestContext): Promise<Store> => await openTestStore(t, kind)

  test(`${kind}: create is idempotent for identical data and refuses different data`, async (t) => {
    const store = await open(t)
    assert.equal((await store.create({ id: 1n, name: 'Fern', tag: 'shade' })).outcome, 'created')
    assert.equal((await store.create({ id: 1n, name: 'Fern', tag: 'shade' })).outcome, 'same')
    assert.equal((await store.create({ id: 1n, name: 'Fern' })).outcome, 'conflict')
    assert.equal((await store.create({ id: 1n, name: 'Moss', tag: 'shade' })).outcome, 'conflict')
    assert.equal((await store.create({ id: 2n, name: 'Moss' })).outcome, 'created')
    assert.equal((await store.create({ id: 2n, name: 'Moss', tag: '' })).outcome, 'conflict', 'an empty tag is a tag, not its absence')
    assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'Fern', tag: 'shade' })
    assert.equal((await store.get(3n))?.plant, undefined)
  })

  test(`${kind}: the same id created many times at once is stored once: one created, identical ones same, others conflict`, async (t) => {
    const store = await open(t)
    const outcomes = (await Promise.all(Array.from({ length: 20 }, (_, i) => store.create({ id: 7n, name: 'Fern' })))).map(o => o.outcome)
    assert.deepEqual(outcomes.filter(o => o === 'created').length, 1)
    assert.ok(outcomes.every(o => o === 'created' || o === 'same'))
    assert.equal((await store.create({ id: 7n, name: 'Moss' })).outcome, 'conflict')
    assert.deepEqual((await store.list({ limit: 10 })).plants, [{ id: 7n, name: 'Fern' }])
  })

  test(`${kind}: list pages by id with after, tag and limit; replace and remove`, async (t) => {
    const store = await open(t)
    for (const [id, tag] of [[3n, 'a'], [1n, 'b'], [2n, 'a'], [INT64_MAX, 'a'], [INT64_MIN, undefined]] as const) {
      await store.create({ id, name: `n${id}`, ...(tag === undefined ? {} : { tag }) })
    }
    assert.deepEqual((await store.list({ limit: 2 })).plants, [{ id: INT64_MIN, name: `n${INT64_MIN}` }, { id: 1n, name: 'n1', tag: 'b' }], 'whole records, no tag key when none')
    assert.deepEqual((await store.list({ limit: 10, after: 2n })).plants.map(p => p.id), [3n, INT64_MAX])
    assert.deepEqual((await store.list({ limit: 10, after: INT64_MIN })).plants.map(p => p.id), [1n, 2n, 3n, INT64_MAX], 'after is exclusive')
    assert.deepEqual((await store.list({ limit: 10, after: INT64_MAX })).plants, [])
    assert.deepEqual((await store.list({ limit: 10, tag: 'a' })).plants.map(p => p.id), [2n, 3n, INT64_MAX])
    assert.deepEqual((await store.list({ limit: 1, tag: 'a', after: 2n })).plants.map(p => p.id), [3n])
    assert.deepEqual((await store.list({ limit: 10, tag: 'none' })).plants, [])
    assert.deepEqual(plantOf(await store.replace(2n, { name: 'two' })), { id: 2n, name: 'two' })
    assert.deepEqual((await store.get(2n))?.plant, { id: 2n, name: 'two' }, 'no tag: no tag key, not tag: null')
    assert.deepEqual(plantOf(await store.replace(2n, { name: 'two', tag: 'z' })), { id: 2n, name: 'two', tag: 'z' })
    assert.equal(await store.replace(5n, { name: 'none' }), 'not-found')
    assert.equal((await store.get(5n))?.plant, undefined, 'replace does not create')
    assert.ok(typeof await store.remove(2n) === 'object')
    assert.equal(await store.remove(2n), 'not-found')
    assert.equal((await store.get(2n))?.plant, undefined)
    assert.equal((await store.create({ id: 2n, name: 'again' })).outcome, 'created', 'a removed id is free again')
  })

  test(`${kind}: int64 extremes and unicode text round-trip exactly`, async (t) => {
    const store = await open(t)
    const ids = [INT64_MIN, INT64_MIN + 1n, -(2n ** 53n) - 1n, -1n, 0n, 2n ** 53n + 1n, INT64_MAX - 1n, INT64_MAX]
    const names = ['Fern 🌿', '羊歯', 'e\u0301', 'שרך', '𝔉𝔢𝔯𝔫', 'x'.repeat(200), '"\'\\;--', ' spaced ']
    for (const [i, id] of ids.entries()) assert.equal((await store.create({ id, name: names[i], tag: `🌱${i}` })).outcome, 'created')
    for (const [i, id] of ids.entries()) assert.deepEqual((await store.get(id))?.plant, { id, name: names[i], tag: `🌱${i}` })
    assert.deepEqual((await store.list({ limit: 100 })).plants.map(p => p.id), ids)
    assert.equal((await store.create({ id: INT64_MAX, name: names[7], tag: '🌱7' })).outcome, 'same')
  })

  test(`${kind}: tokens are created, found by digest, listed in order and revoked by name or id`, async (t) => {
    const store = await open(t)
    const expiresAt = new Date(Date.now() + 3_600_000)
    const ci = await store.createToken(token('ci', { scopes: ['admin'], expiresAt }))
    assert.ok(ci !== 'name-taken')
    assert.deepEqual({ ...ci, createdAt: undefined }, { id: ci.id, name: 'ci', scopes: ['admin'], expiresAt, createdAt: undefined })
    assert.ok(Math.abs(ci.createdAt.getTime() - Date.now()) < 5000)
    const dev = await store.createToken(token('dev'))
    assert.ok(dev !== 'name-taken' && dev.id > ci.id)
    assert.equal(typeof dev.id, 'number')
    const found = await store.findToken(token('dev').digest)
    assert.deepEqual(found?.record, dev)
    assert.ok(found?.digest.equals(token('dev').digest))
    assert.equal(await store.findToken(Buffer.alloc(32)), undefined)
    assert.deepEqual((await store.listTokens()).map(r => r.name), ['ci', 'dev'])
    const revoked = await store.revokeToken('ci')
    assert.ok(revoked?.revokedAt instanceof Date)
    assert.ok((await store.findToken(token('ci').digest))?.record.revokedAt instanceof Date, 'a revoked token is still found, marked revoked')
    assert.equal(await store.revokeToken('ci'), undefined, 'no active token has the name any more')
    assert.equal((await store.revokeToken(String(dev.id)))?.name, 'dev', 'by id')
    assert.equal(await store.revokeToken('nobody'), undefined)
    assert.equal(await store.revokeToken('999999'), undefined)
  })

  test(`${kind}: token names are unique among active tokens; revoking or expiry frees a name`, async (t) => {
    const store = await open(t)
    assert.notEqual(await store.createToken(token('ci')), 'name-taken')
    assert.equal(await store.createToken(token('ci', { digest: Buffer.alloc(32, 1) })), 'name-taken')
    await store.revokeToken('ci')
    const second = await store.createToken(token('ci', { digest: Buffer.alloc(32, 2) }))
    assert.ok(second !== 'name-taken', 'a revoked token frees its name')
    assert.notEqual(await store.createToken(token('old', { digest: Buffer.alloc(32, 3), expiresAt: new Date(Date.now() - 1000) })), 'name-taken')
    const renewed = await store.createToken(token('old', { digest: Buffer.alloc(32, 4) }))
    assert.ok(renewed !== 'name-taken', 'an expired token frees its name')
    const old = (await store.listTokens()).filter(r => r.name === 'old')
    assert.equal(old.length, 2, 'the expired token keeps its row')
    assert.ok(old[0].revokedAt !== undefined, 'marked ended')
    assert.equal((await store.revokeToken('old'))?.id, renewed.id, 'the name now picks the new token')
  })

  test(`${kind}: the first token is created only on a store without tokens, once even when asked for many times at once`, async (t) => {
    const store = await open(t)
    const outcomes = await Promise.all(Array.from({ length: 8 }, (_, i) => store.createFirstToken(token(`initial${i}`))))
    assert.equal(outcomes.filter(o => o !== undefined).length, 1)
    assert.equal((await store.listTokens()).length, 1)
    for (const record of await store.listTokens()) await store.revokeToken(record.name)
    assert.equal(await store.createFirstToken(token('again')), undefined, 'a revoked token still counts')
  })

  test(`${kind}: ping answers; after close every call is refused as unavailable (503)`, async (t) => {
    const store = await open(t)
    await store.ping()
    await store.create({ id: 1n, name: 'Fern' })
    await store.close()
    await store.close()
    for (const call of [() => store.create({ id: 2n, name: 'late' }), () => store.get(1n), () => store.list({ limit: 1 }), () => store.ping(), () => store.createToken(token('late')), () => store.findToken(Buffer.alloc(32))]) {
      await assert.rejects(call(), StoreUnavailableError)
    }
  })
}
