// The change log's store contract (SPEC section 9): the same behaviours on SQLite always and on
// PostgreSQL when TEST_DATABASE_URL names a server.
import assert from 'node:assert/strict'
import { test, type TestContext } from 'node:test'
import { CHANGES_SCAN, type Change, type ChangesPage, type PlantRecord, type Store } from '../../src/store/store.js'
import { testStores } from '../helpers.js'
import { openTestStore, plantOf } from '../stored.js'

const INT64_MAX = 9223372036854775807n

/** The page's changes as [position, type, plant]; fails on 'gone'. */
function shown (page: ChangesPage): Array<[bigint, string, PlantRecord]> {
  assert.notEqual(page, 'gone')
  return (page as { changes: Change[] }).changes.map(change => [change.position, change.type, change.plant])
}

async function * pagesOf (plants: PlantRecord[]): AsyncGenerator<PlantRecord[]> {
  yield plants
}

for (const kind of testStores()) {
  const open = async (t: TestContext): Promise<Store> => await openTestStore(t, kind)

  test(`${kind}: every create, replace and delete is logged once, in order, with the plant as the change left it`, async (t) => {
    const store = await open(t)
    assert.deepEqual(await store.logBounds(), { head: 0n, floor: 0n }, 'an empty log')
    const created = await store.create({ id: INT64_MAX, name: 'Fern', tag: 'shade' })
    assert.deepEqual(created, { outcome: 'created', version: 1n })
    assert.deepEqual(await store.create({ id: INT64_MAX, name: 'Fern', tag: 'shade' }), { outcome: 'same', version: 1n }, 'an identical retry logs nothing')
    assert.equal((await store.create({ id: INT64_MAX, name: 'Moss' })).outcome, 'conflict')
    assert.deepEqual(await store.replace(INT64_MAX, { name: 'Fern', tag: 'sun' }), { plant: { id: INT64_MAX, name: 'Fern', tag: 'sun' }, version: 2n })
    assert.equal(await store.replace(5n, { name: 'none' }), 'not-found')
    assert.deepEqual(await store.remove(INT64_MAX), { position: 3n })
    assert.equal(await store.remove(INT64_MAX), 'not-found')
    assert.deepEqual(await store.create({ id: INT64_MAX, name: 'Fern' }), { outcome: 'created', version: 4n }, 'created again: a new version, never an old one')
    assert.deepEqual(await store.logBounds(), { head: 4n, floor: 0n })

    const page = await store.changes({ limit: 10 })
    assert.deepEqual(shown(page), [
      [1n, 'plant.created', { id: INT64_MAX, name: 'Fern', tag: 'shade' }],
      [2n, 'plant.updated', { id: INT64_MAX, name: 'Fern', tag: 'sun' }],
      [3n, 'plant.deleted', { id: INT64_MAX, name: 'Fern', tag: 'sun' }],
      [4n, 'plant.created', { id: INT64_MAX, name: 'Fern' }]
    ])
    assert.ok((page as { changes: Change[] }).changes.every(change => change.at instanceof Date && Math.abs(change.at.getTime() - Date.now()) < 60_000))
    assert.deepEqual(shown(await store.changes({ after: 2n, limit: 10 })).map(([position]) => position), [3n, 4n], 'after is exclusive')
    assert.deepEqual(await store.changes({ after: 4n, limit: 10 }), { changes: [], next: 4n, from: 4n }, 'nothing after the head, yet not gone')
    assert.equal(await store.changes({ after: 5n, limit: 10 }), 'gone', 'a position never reached')
    assert.equal(await store.changes({ after: INT64_MAX, limit: 10 }), 'gone', 'the largest position of all')
    assert.equal(await store.changes({ after: INT64_MAX, limit: 10, tag: 'shade' }), 'gone')
  })

  test(`${kind}: versions: a plant's is its last change's position; conditions are checked against it, and a refused write changes and logs nothing`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'Fern' })
    await store.create({ id: 2n, name: 'Moss' })
    assert.equal((await store.get(1n))?.version, 1n)
    assert.equal(await store.replace(1n, { name: 'stale' }, { ifMatch: [2n] }), 'precondition-failed')
    assert.equal(await store.replace(3n, { name: 'none' }, { ifMatch: '*' }), 'not-found', 'a missing plant is not found, whatever the conditions')
    assert.equal(await store.replace(3n, { name: 'none' }, { ifMatch: [1n] }), 'not-found')
    assert.equal(await store.remove(1n, { ifMatch: [7n, 2n] }), 'precondition-failed')
    assert.equal(await store.remove(3n, { ifMatch: '*' }), 'not-found')
    assert.deepEqual(await store.logBounds(), { head: 2n, floor: 0n }, 'refusals log nothing')
    assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'Fern' })
    assert.deepEqual(await store.replace(1n, { name: 'Fern', tag: 'a' }, { ifMatch: [9n, 1n] }), { plant: { id: 1n, name: 'Fern', tag: 'a' }, version: 3n }, 'any ETag of the list matches')
    assert.equal(plantOf(await store.replace(1n, { name: 'Fern' }, { ifMatch: '*' })).name, 'Fern')
    assert.equal((await store.get(1n))?.version, 4n)
    assert.deepEqual(await store.remove(1n, { ifMatch: [4n] }), { position: 5n })
    assert.equal((await store.get(2n))?.version, 2n, 'other plants keep theirs')
    // If-None-Match: refused when it names the plant's version, or with * when the plant exists.
    assert.equal(await store.replace(2n, { name: 'taken' }, { ifNoneMatch: '*' }), 'precondition-failed')
    assert.equal(await store.replace(2n, { name: 'taken' }, { ifNoneMatch: [9n, 2n] }), 'precondition-failed')
    assert.equal(await store.remove(2n, { ifNoneMatch: '*' }), 'precondition-failed')
    assert.equal(await store.remove(2n, { ifMatch: [2n], ifNoneMatch: [2n] }), 'precondition-failed', 'both apply')
    assert.equal(await store.replace(1n, { name: 'gone' }, { ifNoneMatch: '*' }), 'not-found', 'If-None-Match: * holds for a missing plant')
    assert.deepEqual(await store.logBounds(), { head: 5n, floor: 0n }, 'refusals log nothing')
    assert.deepEqual(await store.replace(2n, { name: 'Moss', tag: 'b' }, { ifNoneMatch: [1n] }), { plant: { id: 2n, name: 'Moss', tag: 'b' }, version: 6n })
    assert.deepEqual(await store.remove(2n, { ifMatch: '*', ifNoneMatch: [5n] }), { position: 7n })
  })

  test(`${kind}: two replaces racing with the same version: exactly one is applied`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'Fern' })
    const outcomes = await Promise.all(Array.from({ length: 8 }, (_, i) => store.replace(1n, { name: `writer ${i}` }, { ifMatch: [1n] })))
    const applied = outcomes.filter(outcome => typeof outcome === 'object')
    assert.equal(applied.length, 1, JSON.stringify(outcomes, (_key, value: unknown) => typeof value === 'bigint' ? String(value) : value))
    assert.equal(outcomes.filter(outcome => outcome === 'precondition-failed').length, 7)
    assert.deepEqual((await store.get(1n))?.plant, plantOf(applied[0]))
    assert.equal((await store.logBounds()).head, 2n)
  })

  test(`${kind}: tag: a change shows to a tag's readers when the plant carried the tag before or after it; limit and next`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'a', tag: 'fern' }) // 1
    await store.create({ id: 2n, name: 'b', tag: 'moss' }) // 2
    await store.replace(1n, { name: 'a' }) // 3: the tag removed
    await store.replace(2n, { name: 'b', tag: 'fern' }) // 4: the tag added
    await store.remove(2n) // 5
    await store.create({ id: 3n, name: 'c' }) // 6
    assert.deepEqual(shown(await store.changes({ limit: 10, tag: 'fern' })).map(([position]) => position), [1n, 3n, 4n, 5n])
    assert.deepEqual(shown(await store.changes({ limit: 10, tag: 'moss' })).map(([position]) => position), [2n, 4n])
    assert.deepEqual(await store.changes({ limit: 10, tag: 'none' }), { changes: [], next: 6n, from: 0n }, 'a filtered read passes over what it does not show')
    const first = await store.changes({ limit: 2, tag: 'fern' })
    assert.deepEqual(shown(first).map(([position]) => position), [1n, 3n])
    assert.equal((first as { next: bigint }).next, 3n, 'a full page goes on after its last change')
    assert.deepEqual(await store.changes({ after: 5n, limit: 2, tag: 'fern' }), { changes: [], next: 6n, from: 5n })
    assert.deepEqual(shown(await store.changes({ limit: 10, tag: '\u0000' })), [], 'a tag no store can hold matches nothing')
  })

  test(`${kind}: a filtered read passes over CHANGES_SCAN changes at most, then answers a bookmark`, async (t) => {
    const store = await open(t)
    const total = CHANGES_SCAN + 5
    // 32 at a time: PostgreSQL commits plant writes one by one, and each must meet its deadline.
    for (let from = 0; from < total; from += 32) {
      await Promise.all(Array.from({ length: Math.min(32, total - from) }, (_, i) => store.create({ id: BigInt(from + i), name: 'p' })))
    }
    await store.create({ id: -1n, name: 'late', tag: 'rare' })
    const page = await store.changes({ limit: 10, tag: 'rare' })
    assert.deepEqual(page, { changes: [], next: BigInt(CHANGES_SCAN), from: 0n })
    const next = await store.changes({ after: BigInt(CHANGES_SCAN), limit: 10, tag: 'rare' })
    assert.deepEqual(shown(next).map(([position, , plant]) => [position, plant.id]), [[BigInt(total + 1), -1n]])
  })

  test(`${kind}: pruning drops only the oldest changes made before the cutoff; what follows them is gone, the rest stays`, async (t) => {
    const store = await open(t)
    for (let id = 1n; id <= 5n; id++) await store.create({ id, name: 'p' })
    const cutoff = new Date(Date.now() + 1000)
    assert.equal(await store.pruneChanges(new Date(0), 10), 0, 'nothing older than the epoch')
    assert.equal(await store.pruneChanges(cutoff, 2), 2, 'a batch at a time')
    assert.deepEqual(await store.logBounds(), { head: 5n, floor: 2n })
    assert.equal(await store.changes({ after: 1n, limit: 10 }), 'gone', 'what followed 1 is partly dropped')
    assert.deepEqual(shown(await store.changes({ after: 2n, limit: 10 })).map(([position]) => position), [3n, 4n, 5n])
    const oldest = await store.changes({ limit: 10 })
    assert.deepEqual(shown(oldest).map(([position]) => position), [3n, 4n, 5n], 'no after: from the oldest kept')
    assert.equal((oldest as { from: bigint }).from, 2n, 'read after the floor: where a reader that gave no position starts')
    assert.equal(await store.pruneChanges(cutoff, 10), 3)
    assert.deepEqual(await store.logBounds(), { head: 5n, floor: 5n }, 'an emptied log keeps its head')
    assert.deepEqual(await store.changes({ after: 5n, limit: 10 }), { changes: [], next: 5n, from: 5n })
    assert.equal(await store.changes({ after: 4n, limit: 10 }), 'gone')
    assert.deepEqual(await store.create({ id: 6n, name: 'p' }), { outcome: 'created', version: 6n }, 'positions go on above the head')
    assert.equal((await store.get(1n))?.version, 1n, 'pruning drops changes, never plants')
  })

  test(`${kind}: list answers the log's head with its page: the page shows exactly the changes up to it`, async (t) => {
    const store = await open(t)
    assert.deepEqual(await store.list({ limit: 10 }), { plants: [], position: 0n })
    await store.create({ id: 1n, name: 'a' })
    await store.create({ id: 2n, name: 'b', tag: 't' })
    assert.equal((await store.list({ limit: 1 })).position, 2n)
    assert.equal((await store.list({ limit: 10, tag: 'none' })).position, 2n, 'also when the page is empty')
    await store.remove(1n)
    assert.deepEqual(await store.list({ limit: 10, after: 1n }), { plants: [{ id: 2n, name: 'b', tag: 't' }], position: 3n })
  })

  test(`${kind}: an import starts the log anew above its head: every earlier position is gone, imported plants are at the new head`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'a' })
    await store.create({ id: 2n, name: 'b' })
    assert.deepEqual(await store.importPlants(pagesOf([{ id: 5n, name: 'five' }, { id: 6n, name: 'six', tag: 't' }]), { replace: true }), { outcome: 'imported', plants: 2 })
    const { head, floor } = await store.logBounds()
    assert.ok(head > 2n, `the head moved on: ${head}`)
    assert.equal(floor, head, 'nothing kept')
    assert.equal(await store.changes({ after: 2n, limit: 10 }), 'gone')
    assert.equal((await store.get(5n))?.version, head)
    assert.deepEqual(await store.replace(6n, { name: 'six' }, { ifMatch: [head] }), { plant: { id: 6n, name: 'six' }, version: head + 1n })
    assert.deepEqual(shown(await store.changes({ after: head, limit: 10 })), [[head + 1n, 'plant.updated', { id: 6n, name: 'six' }]])
  })
}
