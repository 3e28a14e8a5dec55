// What is about PostgreSQL itself: SQLSTATE mapping, lost connections, deadlines, migrations.
import assert from 'node:assert/strict'
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { test, type TestContext } from 'node:test'
import { ConfigError } from '../../src/config.js'
import { StoreUnavailableError, UnstorableTextError } from '../../src/errors.js'
import { openStore } from '../../src/store/open.js'
import { DEFAULT_PG_LIMITS, PostgresStore, type PostgresLimits } from '../../src/store/postgres.js'
import { migrationsOf } from '../../src/store/migrations.js'
import { adminQuery, PG_SKIP, PG_URL, pgSchema } from './postgres-helpers.js'
import { plantOf } from '../stored.js'

async function open (t: TestContext, limits: Partial<PostgresLimits> = {}): Promise<{ store: PostgresStore, url: string, schema: string, app: string }> {
  const app = `ps_${randomBytes(6).toString('hex')}`
  const { url, schema } = await pgSchema(t, app)
  const store = await PostgresStore.open(url, limits)
  t.after(() => store.close())
  return { store, url, schema, app }
}

/** Settles `promise` and says how: the value, or the error's class. */
async function outcome (promise: Promise<unknown>): Promise<unknown> {
  try {
    return await promise
  } catch (error) {
    return error instanceof StoreUnavailableError ? 'unavailable' : error
  }
}

/**
 * Runs `work` while another session holds plant `id` locked (`FOR UPDATE`), as an operator's
 * open transaction would; `release` ends that transaction. The session ends whatever happens,
 * before the test's schema is dropped.
 */
async function whileRowHeld (url: string, id: number, work: (release: () => Promise<void>) => Promise<void>): Promise<void> {
  const holder = new pg.Client({ connectionString: url })
  await holder.connect()
  try {
    await holder.query('BEGIN')
    await holder.query('SELECT * FROM plants WHERE id = $1 FOR UPDATE', [id])
    await work(async () => { await holder.query('ROLLBACK') })
  } finally {
    await holder.end()
  }
}

if (PG_URL === undefined) {
  test('PostgreSQL store', { skip: PG_SKIP }, () => {})
} else {
  test('a unique violation (23505) from any path is a conflict, not a failure', async (t) => {
    const { store, schema } = await open(t)
    // A second unique index, which ON CONFLICT (id) does not cover: its violation raises 23505.
    await adminQuery(`CREATE UNIQUE INDEX plants_name ON ${schema}.plants (name)`)
    assert.equal((await store.create({ id: 1n, name: 'Fern' })).outcome, 'created')
    assert.equal((await store.create({ id: 2n, name: 'Fern' })).outcome, 'conflict')
    assert.equal(await store.get(2n), undefined)
  })

  test('creates that arrive together share one transaction: the head taken once, every outcome its own', async (t) => {
    const { store, schema } = await open(t)
    assert.equal((await store.create({ id: 3n, name: 'Stored' })).outcome, 'created')
    // One turn: 60 new plants (ids out of order), a repeat of a new one in the same turn (answered
    // from the first, logged once), an identical retry of a stored one, and a conflicting one.
    const ids = Array.from({ length: 60 }, (_, i) => BigInt(1000 - i * 7))
    const [created, repeat, same, conflict] = await Promise.all([
      Promise.all(ids.map(id => store.create({ id, name: `p${id}` }))),
      store.create({ id: ids[5], name: `p${ids[5]}` }),
      store.create({ id: 3n, name: 'Stored' }),
      store.create({ id: 3n, name: 'Other' })
    ])
    // The repeat may run in the second transaction under way and reach the id first: then it is
    // the one created, and the first the one answered 'same'. Either way, one of them, one version.
    const [first, again] = created[5].outcome === 'created' ? [created[5], repeat] : [repeat, created[5]]
    assert.deepEqual(again, { outcome: 'same', version: first.version }, 'the repeat answered from the create that stored it')
    const versions = created.map((c, i) => i === 5 ? first : c)
    assert.deepEqual(versions.filter(c => c.outcome !== 'created'), [], 'every new plant created once')
    assert.deepEqual(versions.map(c => c.version).sort((a, b) => Number(a! - b!)), Array.from({ length: 60 }, (_, i) => BigInt(i + 2)), 'positions 2–61, each once')
    assert.deepEqual([same, conflict], [{ outcome: 'same', version: 1n }, { outcome: 'conflict', version: 1n }])
    for (const [i, id] of ids.entries()) assert.deepEqual(await store.get(id), { plant: { id, name: `p${id}` }, version: versions[i].version })
    // Rows written by one transaction share its id (xmin).
    const logged = await adminQuery(`SELECT count(*)::int AS changes, count(DISTINCT xmin::text)::int AS transactions FROM ${schema}.changes WHERE position > 1`)
    assert.equal(logged.rows[0].changes, 60, 'each create logged once, the retries not')
    assert.ok(logged.rows[0].transactions <= 2, `${logged.rows[0].transactions} transactions for 60 creates of one turn`)
  })

  test('a batch refused by an index an operator added runs in halves: only the create that violates it is a conflict', async (t) => {
    const { store, schema } = await open(t)
    await adminQuery(`CREATE UNIQUE INDEX plants_name ON ${schema}.plants (name)`)
    assert.equal((await store.create({ id: 1n, name: 'Fern' })).outcome, 'created')
    const outcomes = await Promise.all([2n, 3n, 4n, 5n].map(id => store.create({ id, name: id === 4n ? 'Fern' : `p${id}` })))
    assert.deepEqual(outcomes.map(o => o.outcome), ['created', 'created', 'conflict', 'created'])
    assert.equal(await store.get(4n), undefined)
    assert.equal((await adminQuery(`SELECT count(*)::int AS n FROM ${schema}.changes`)).rows[0].n, 4)
    // Run in halves, not one create at a time: 2 and 3, the half without the refused create, share a transaction.
    const { rows } = await adminQuery(`SELECT count(DISTINCT xmin::text)::int AS n FROM ${schema}.changes WHERE plant_id IN (2, 3)`)
    assert.equal(rows[0].n, 1)
  })

  test('two instances creating the same ids in opposite orders, beside replaces and deletes: each settles once, every version is its last change\'s position, no position is skipped', async (t) => {
    const { url, schema } = await pgSchema(t)
    const [a, b] = await Promise.all([PostgresStore.open(url, { writeTimeoutMs: 10_000 }), PostgresStore.open(url, { writeTimeoutMs: 10_000 })])
    t.after(() => Promise.all([a.close(), b.close()]))
    for (let id = 1n; id <= 20n; id++) await a.create({ id, name: `p${id}` })
    const fresh = Array.from({ length: 100 }, (_, i) => BigInt(21 + i))
    const [fromA, fromB, ...rest] = await Promise.all([
      Promise.all(fresh.map(id => a.create({ id, name: `p${id}` }))),
      Promise.all([...fresh].reverse().map(id => b.create({ id, name: `p${id}` }))),
      ...[11n, 12n, 13n, 14n, 15n].map(id => a.replace(id, { name: 'replaced' })),
      ...[16n, 17n, 18n, 19n, 20n].map(id => b.remove(id)),
      ...[16n, 17n, 18n, 19n, 20n].map(id => b.create({ id, name: `p${id}` })),
      ...[1n, 2n, 3n].map(id => b.create({ id, name: `p${id}` })),
      ...[4n, 5n].map(id => a.create({ id, name: 'other' }))
    ])
    const byId = new Map<bigint, string[]>()
    for (const [i, id] of fresh.entries()) byId.set(id, [fromA[i].outcome, fromB[fresh.length - 1 - i].outcome])
    for (const [id, outcomes] of byId) assert.deepEqual(outcomes.sort(), ['created', 'same'], `id ${id}: created once, the other same`)
    assert.deepEqual(rest.slice(15, 20).map(r => (r as { outcome: string }).outcome), ['same', 'same', 'same'].concat(['conflict', 'conflict']))
    const { rows: positions } = await adminQuery(`SELECT position::int AS p FROM ${schema}.changes ORDER BY position`)
    assert.deepEqual(positions.map(row => row.p), Array.from({ length: positions.length }, (_, i) => i + 1), 'positions 1..head, none skipped')
    const { rows: mismatched } = await adminQuery(`SELECT p.id FROM ${schema}.plants p WHERE p.version <> (SELECT max(position) FROM ${schema}.changes c WHERE c.plant_id = p.id)`)
    assert.deepEqual(mismatched, [], 'every version is the position of its plant\'s last change')
    assert.equal((await adminQuery(`SELECT count(*)::int AS n FROM ${schema}.changes WHERE type = 'plant.created' AND plant_id BETWEEN 21 AND 120`)).rows[0].n, 100, 'each new id logged once')
  })

  test('batches that deadlock on an index an operator added are split, not refused: every create settles as it would alone', async (t) => {
    const { url, schema } = await pgSchema(t)
    const [a, b] = await Promise.all([PostgresStore.open(url, { writeTimeoutMs: 10_000 }), PostgresStore.open(url, { writeTimeoutMs: 10_000 })])
    t.after(() => Promise.all([a.close(), b.close()]))
    await adminQuery(`CREATE UNIQUE INDEX plants_name ON ${schema}.plants (name)`)
    // Ids ascend in both batches, the names they hold cross: each batch waits on the other's name.
    // A pause before each batch's second row makes both hold their first name before either asks for the second.
    await adminQuery(`CREATE FUNCTION ${schema}.pause () RETURNS trigger AS $$ BEGIN IF NEW.id IN (2, 4) THEN PERFORM pg_sleep(0.3); END IF; RETURN NEW; END $$ LANGUAGE plpgsql;
      CREATE TRIGGER pause BEFORE INSERT ON ${schema}.plants FOR EACH ROW EXECUTE FUNCTION ${schema}.pause()`)
    const outcomes = await Promise.all([
      ...[1n, 2n].map((id, i) => a.create({ id, name: ['x', 'y'][i] })),
      ...[3n, 4n].map((id, i) => b.create({ id, name: ['y', 'x'][i] }))
    ])
    assert.equal(outcomes.filter(o => o.outcome === 'created').length, 2, JSON.stringify(outcomes, (_, v) => typeof v === 'bigint' ? String(v) : v))
    assert.equal(outcomes.filter(o => o.outcome === 'conflict').length, 2)
    const { rows } = await adminQuery(`SELECT name FROM ${schema}.plants ORDER BY name`)
    assert.deepEqual(rows.map(row => row.name), ['x', 'y'])
  })

  test('a create still waiting for its batch when its caller is answered 503 is dropped, never stored', async (t) => {
    const { store, url } = await open(t, { writeTimeoutMs: 300 })
    const holder = new pg.Client({ connectionString: url })
    await holder.connect()
    t.after(() => holder.end())
    await holder.query('BEGIN')
    await holder.query('SELECT head FROM change_log FOR UPDATE') // every plant write waits for the head
    // Asked for in one turn, so that every deadline starts before any batch's statement (asked a
    // turn apart, a batch's statement timeout could free its place a moment before the last
    // caller's deadline, and that create begin). A batch takes 256: two are under way, the last waits.
    const last = 513n
    const answers = Array.from({ length: Number(last) }, (_, i) => outcome(store.create({ id: BigInt(i + 1), name: `p${i + 1}` })))
    assert.deepEqual(new Set(await Promise.all(answers)), new Set(['unavailable']))
    // The lock is kept past the statement timeout of the two under way (the same 300 ms, counted
    // by the server from their statements): they roll back. Had the last create been run once
    // their places freed, it would be waiting for the lock now, and would take it.
    await new Promise(resolve => setTimeout(resolve, 200))
    await holder.query('ROLLBACK')
    await new Promise(resolve => setTimeout(resolve, 300))
    assert.equal(await store.get(last), undefined, 'answered 503 before it began: not stored')
    assert.equal((await store.create({ id: last, name: 'c' })).outcome, 'created')
  })

  test('a name or tag holding U+0000, which PostgreSQL text cannot keep, is refused as the client\'s error and nothing is stored', async (t) => {
    const { store } = await open(t)
    await assert.rejects(store.create({ id: 1n, name: 'a\u0000b' }), UnstorableTextError)
    await assert.rejects(store.create({ id: 1n, name: 'ok', tag: '\u0000' }), UnstorableTextError)
    assert.equal(await store.get(1n), undefined)
    assert.equal((await store.create({ id: 1n, name: 'ok' })).outcome, 'created')
    await assert.rejects(store.replace(1n, { name: '\u0000' }), UnstorableTextError)
    assert.deepEqual((await store.list({ limit: 10, tag: '\u0000' })).plants, [])
    assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'ok' })
  })

  test('connections the server ends are dropped: calls on them are refused as unavailable (57P01), at once, and the store recovers', async (t) => {
    const { store, app, url } = await open(t)
    await Promise.all(Array.from({ length: 5 }, (_, i) => store.create({ id: BigInt(i), name: `p${i}` })))
    // Writes waiting in the server for a row lock are under way on their connections when these end.
    await whileRowHeld(url.replace(`application_name=${app}`, 'application_name=holder'), 1, async (release) => {
      const started = Date.now()
      const waiting = Array.from({ length: 3 }, () => outcome(store.replace(1n, { name: 'Moss' })))
      await new Promise(resolve => setTimeout(resolve, 200))
      const ended = await adminQuery('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1', [app])
      assert.ok(ended.rowCount! >= 3)
      assert.deepEqual(await Promise.all(waiting), ['unavailable', 'unavailable', 'unavailable'], 'refused as unavailable, not a bug (500)')
      assert.ok(Date.now() - started < 1500, `took ${Date.now() - started} ms: not a wait for the deadline`)
      await release()
    })
    // Meanwhile the store looks for its host again, answering 503 at once: a client waits Retry-After.
    let recovered = false
    for (let attempt = 0; attempt < 100 && !recovered; attempt++) {
      recovered = (await outcome(store.get(0n)) as { plant?: { name: string } } | undefined)?.plant?.name === 'p0'
      if (!recovered) await new Promise(resolve => setTimeout(resolve, 50))
    }
    assert.ok(recovered, 'new connections answer')
    assert.deepEqual(plantOf(await store.replace(1n, { name: 'Moss' })), { id: 1n, name: 'Moss' })
  })

  test('a database that cannot be reached at start fails with one line, in time, naming no password', async () => {
    const started = Date.now()
    await assert.rejects(openStore('postgres://postgres:secret@127.0.0.1:1/test'), (error: Error) => {
      assert.ok(error instanceof ConfigError)
      assert.match(error.message, /^Cannot open the PostgreSQL database in DATABASE_URL: ECONNREFUSED/)
      assert.doesNotMatch(error.message, /secret|\n/)
      return true
    })
    assert.ok(Date.now() - started < 2500)
  })

  test('a write held by a lock answers unavailable at the deadline, within 2 s, and goes through once the lock is gone', async (t) => {
    const { store, url } = await open(t)
    await store.create({ id: 1n, name: 'Fern' })
    await whileRowHeld(url, 1, async (release) => {
      const started = Date.now()
      assert.equal(await outcome(store.replace(1n, { name: 'Moss' })), 'unavailable')
      const took = Date.now() - started
      assert.ok(took >= DEFAULT_PG_LIMITS.writeTimeoutMs - 20 && took < 2000, `took ${took} ms`)
      assert.deepEqual((await store.get(1n))?.plant, { id: 1n, name: 'Fern' }, 'reads are still served')
      await release()
    })
    assert.deepEqual(plantOf(await store.replace(1n, { name: 'Moss' })), { id: 1n, name: 'Moss' })
  })

  test('past the cap of writes in flight a write is refused at once', async (t) => {
    const { store, url } = await open(t, { writesInFlight: 1 })
    await store.create({ id: 1n, name: 'Fern' })
    await whileRowHeld(url, 1, async (release) => {
      const held = outcome(store.replace(1n, { name: 'Moss' }))
      const started = Date.now()
      assert.equal(await outcome(store.create({ id: 2n, name: 'Ivy' })), 'unavailable')
      assert.ok(Date.now() - started < 200)
      await release()
      assert.deepEqual((await held as { plant?: unknown }).plant, { id: 1n, name: 'Moss' })
    })
  })

  test('three stores migrating one empty schema at once all work, and each migration is applied once', async (t) => {
    const { url } = await pgSchema(t)
    const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open(url)))
    t.after(() => Promise.all(stores.map(store => store.close())))
    for (const [i, store] of stores.entries()) assert.equal((await store.create({ id: BigInt(i), name: `p${i}` })).outcome, 'created')
    for (const store of stores) assert.equal((await store.list({ limit: 10 })).plants.length, 3, 'one schema')
    const client = new pg.Client({ connectionString: url })
    await client.connect()
    t.after(() => client.end())
    const { rows } = await client.query('SELECT version FROM schema_version ORDER BY version')
    assert.deepEqual(rows.map(row => row.version), migrationsOf('postgres').map(m => m.version))
  })

  test('a schema newer than this plantstore knows is refused, in one sentence', async (t) => {
    const { url, schema } = await pgSchema(t)
    await (await PostgresStore.open(url)).close()
    await adminQuery(`INSERT INTO ${schema}.schema_version (version, name) VALUES (999, '999-future.sql')`)
    await assert.rejects(PostgresStore.open(url), /schema is version 999, newer than this plantstore knows/)
    await assert.rejects(openStore(url), (error: Error) => error instanceof ConfigError && /knows \(\d+\); upgrade plantstore\.$/.test(error.message))
  })
}
