// Store.exportPlants and Store.importPlants, on SQLite always and on PostgreSQL when
// TEST_DATABASE_URL names a server (each test in a schema of its own).
import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { PostgresStore } from '../../src/store/postgres.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import type { PlantRecord, Store } from '../../src/store/store.js'
import { tempDir, testStores } from '../helpers.js'
import { openTestStore, plantOf } from '../stored.js'
import { adminQuery, PG_SKIP, PG_URL, pgSchema } from './postgres-helpers.js'

const INT64_MIN = -9223372036854775808n
const INT64_MAX = 9223372036854775807n

/** `count` plants with ids from `from` up, every third without a tag. */
function plants (from: bigint, count: number): PlantRecord[] {
  return Array.from({ length: count }, (_, i) => {
    const id = from + BigInt(i)
    return i % 3 === 0 ? { id, name: `plant ${id}` } : { id, name: `plant ${id}`, tag: `t${i % 7}` }
  })
}

async function * batchesOf (records: PlantRecord[], size = 1000): AsyncGenerator<PlantRecord[]> {
  for (let i = 0; i < records.length; i += size) yield records.slice(i, i + size)
}

async function exported (store: Store): Promise<PlantRecord[]> {
  const all: PlantRecord[] = []
  for await (const page of store.exportPlants()) all.push(...page)
  return all
}

async function seed (store: Store, records: PlantRecord[]): Promise<void> {
  assert.deepEqual(await store.importPlants(batchesOf(records), { replace: false }), { outcome: 'imported', plants: records.length })
}

for (const kind of testStores()) {
  const open = async (t: TestContext): Promise<Store> => await openTestStore(t, kind)

  test(`${kind}: an empty store exports no page; an empty source imports nothing`, async (t) => {
    const store = await open(t)
    const pages = async (): Promise<PlantRecord[][]> => { const all = []; for await (const page of store.exportPlants()) all.push(page); return all }
    assert.deepEqual(await pages(), [], 'not even an empty page')
    assert.deepEqual(await store.importPlants(batchesOf([]), { replace: false }), { outcome: 'imported', plants: 0 })
    assert.deepEqual(await pages(), [])
  })

  test(`${kind}: export gives every plant exactly, in id order, in pages of at most 1000`, async (t) => {
    const store = await open(t)
    const records = [...plants(-1200n, 2400), { id: INT64_MIN, name: 'min', tag: '' }, { id: INT64_MAX, name: '🌵 صبار' }, { id: 2n ** 53n + 1n, name: 'x' }]
    await seed(store, [...records].reverse())
    const pages: number[] = []
    const all: PlantRecord[] = []
    for await (const page of store.exportPlants()) {
      pages.push(page.length)
      all.push(...page)
    }
    assert.deepEqual(pages, [1000, 1000, 403])
    assert.deepEqual(all, [...records].sort((a, b) => a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
  })

  test(`${kind}: an export is one snapshot: writes made while it runs are not in it`, async (t) => {
    const store = await open(t)
    const records = plants(1n, 3000)
    await seed(store, records)
    const all: PlantRecord[] = []
    for await (const page of store.exportPlants()) {
      if (all.length === 0) {
        // Past the first page: a new plant, a removed one and a changed one, all in pages still to come.
        assert.equal((await store.create({ id: 5000n, name: 'late' })).outcome, 'created')
        assert.equal(typeof await store.remove(2000n), 'object')
        assert.deepEqual(plantOf(await store.replace(2999n, { name: 'changed' })), { id: 2999n, name: 'changed' })
      }
      all.push(...page)
    }
    assert.deepEqual(all, records)
    const next = await exported(store)
    assert.equal(next.find(plant => plant.id === 5000n)?.name, 'late', 'the next export sees the new plant')
    assert.ok(!next.some(plant => plant.id === 2000n), 'and not the removed one')
    assert.deepEqual(next.find(plant => plant.id === 2999n), { id: 2999n, name: 'changed' }, 'and the change')
  })

  test(`${kind}: import refuses a store with plants unless replace, which keeps the tokens`, async (t) => {
    const store = await open(t)
    await store.create({ id: 1n, name: 'old' })
    await store.createToken({ name: 'keep', digest: Buffer.alloc(32, 1), scopes: ['admin'] })
    assert.deepEqual(await store.importPlants(batchesOf(plants(10n, 5)), { replace: false }), { outcome: 'not-empty' })
    assert.deepEqual(await exported(store), [{ id: 1n, name: 'old' }])
    assert.deepEqual(await store.importPlants(batchesOf(plants(10n, 5)), { replace: true }), { outcome: 'imported', plants: 5 })
    assert.deepEqual(await exported(store), plants(10n, 5))
    assert.deepEqual((await store.listTokens()).map(token => [token.name, token.scopes]), [['keep', ['admin']]])
  })

  test(`${kind}: a plant given twice identically is stored once; with other data, the import stores nothing and says where`, async (t) => {
    const store = await open(t)
    const records = plants(1n, 2500)
    const repeated = [...records, records[10], ...plants(3000n, 10), records[1500]]
    assert.deepEqual(await store.importPlants(batchesOf(repeated), { replace: false }), { outcome: 'imported', plants: 2510 })
    assert.equal((await exported(store)).length, 2510)

    const other = await open(t)
    const conflicting = [...records, { id: 7n, name: 'plant 7', tag: 'other' }, ...plants(3000n, 10)]
    assert.deepEqual(await other.importPlants(batchesOf(conflicting), { replace: false }), { outcome: 'conflict', at: 2500 })
    const inOneBatch = [{ id: 1n, name: 'a' }, { id: 2n, name: 'b' }, { id: 1n, name: 'a', tag: 'x' }]
    assert.deepEqual(await other.importPlants(batchesOf(inOneBatch), { replace: false }), { outcome: 'conflict', at: 2 })
    assert.deepEqual(await exported(other), [], 'nothing stored, the first batches neither')
  })

  test(`${kind}: a source that fails part way leaves the store as it was, and its error goes on`, async (t) => {
    const store = await open(t)
    await store.create({ id: -1n, name: 'before' })
    const broken = new Error('line 2501 is bad')
    async function * failing (): AsyncGenerator<PlantRecord[]> {
      yield * batchesOf(plants(1n, 2500))
      throw broken
    }
    await assert.rejects(store.importPlants(failing(), { replace: true }), error => error === broken)
    assert.deepEqual(await exported(store), [{ id: -1n, name: 'before' }], 'not even the delete of replace')
    assert.equal((await store.create({ id: 1n, name: 'plant 1' })).outcome, 'created', 'the store writes again')
  })
}

test('sqlite keeps U+0000 and exports it; postgres refuses it on import, naming its position', async (t) => {
  const sqlite = await openTestStore(t, 'sqlite')
  const records = [...plants(1n, 1500), { id: 2000n, name: 'nul\u0000name' }, { id: 2001n, name: 'n', tag: '\u0000' }]
  await seed(sqlite, records)
  assert.deepEqual((await exported(sqlite)).slice(-2), records.slice(-2))
  if (PG_URL === undefined) return t.skip(PG_SKIP)
  const postgres = await openTestStore(t, 'postgres')
  const outcome = await postgres.importPlants(batchesOf(records), { replace: false })
  assert.equal(outcome.outcome, 'unstorable')
  assert.equal((outcome as { at: number }).at, 1500)
  assert.match((outcome as { reason: string }).reason, /U\+0000/)
  assert.deepEqual(await exported(postgres), [])
})

/** Stops an export after its first page, as a `break` out of `for await` does. */
async function stopAfterFirstPage (store: Store): Promise<void> {
  const pages = store.exportPlants()[Symbol.asyncIterator]()
  assert.equal((await pages.next()).value?.length, 1000)
  await pages.return?.()
}

test('sqlite: an export stopped early ends its read transaction: a checkpoint can then empty the WAL', async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  const store = new SqliteStore(path)
  t.after(() => store.close())
  await seed(store, plants(1n, 2500))
  await stopAfterFirstPage(store)
  assert.equal((await store.create({ id: 9000n, name: 'after' })).outcome, 'created')
  // A reader still in its snapshot would keep the frames written since: the checkpoint would be busy.
  const db = openDatabase(path)
  t.after(() => db.close())
  assert.deepEqual(db.pragma('wal_checkpoint(TRUNCATE)'), [{ busy: 0, log: 0, checkpointed: 0 }])
})

test('postgres: an export stopped early ends its transaction and its connection', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const store = await PostgresStore.open((await pgSchema(t, 'export_stop')).url)
  t.after(() => store.close())
  await seed(store, plants(1n, 2500))
  const sessions = async (): Promise<number> => (await adminQuery("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = 'export_stop'")).rows[0].n
  const before = await sessions() // the pool's own, idle
  await stopAfterFirstPage(store)
  const { rows } = await adminQuery("SELECT state FROM pg_stat_activity WHERE application_name = 'export_stop' AND state <> 'idle'")
  assert.deepEqual(rows, [], 'no transaction left open')
  // The export's own connection is gone too (its backend leaves pg_stat_activity a moment after the client ends it).
  const deadline = Date.now() + 2000
  while (await sessions() > before && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 50))
  assert.equal(await sessions(), before, 'the export\'s connection ended')
})
