import { openDatabase } from '../../src/store/sqlite-driver.js'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { describe, test } from 'node:test'
import pg from 'pg'
import { LIST_SQL } from '../../src/store/sqlite-rows.js'
import { call, cli, freshDatabase, startServer, tempDir, testStores, type Server, type TestDatabase } from '../helpers.js'

const PLANTS = 100_000
const SAMPLES = 60

/**
 * Median wall time of `SAMPLES` GETs of each path, in milliseconds. The paths take turns, so
 * that a change in the machine's load weighs on each of them alike.
 */
async function medianMs (server: Server, paths: string[]): Promise<number[]> {
  const times: number[][] = paths.map(() => [])
  for (let i = 0; i < SAMPLES; i++) {
    for (const [p, path] of paths.entries()) {
      const start = process.hrtime.bigint()
      const answer = await call(server, 'GET', path)
      times[p].push(Number(process.hrtime.bigint() - start) / 1e6)
      assert.equal(answer.status, 200)
      assert.equal(answer.body.length, 100)
    }
  }
  return times.map(samples => samples.sort((a, b) => a - b)[SAMPLES >> 1])
}

/**
 * Fills a new database with plants 1 to PLANTS, the even ones tagged 'even', in one statement
 * straight into its table: as many POSTs would take far longer than the test.
 */
async function fill (database: TestDatabase): Promise<void> {
  assert.equal(cli(database, ['migrate']).status, 0)
  if (database.store === 'sqlite') {
    const db = openDatabase(database.databaseUrl)
    const insert = db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)')
    db.transaction(() => { for (let id = 1; id <= PLANTS; id++) insert.run(id, `plant ${id}`, id % 2 === 0 ? 'even' : null) })()
    db.close()
    return
  }
  const client = new pg.Client({ connectionString: database.databaseUrl })
  await client.connect()
  try {
    await client.query("INSERT INTO plants (id, name, tag) SELECT id, 'plant ' || id, CASE WHEN id % 2 = 0 THEN 'even' END FROM generate_series(1, $1::int8) AS id", [PLANTS])
  } finally {
    await client.end()
  }
}

for (const store of testStores()) {
  describe(store, () => {
    test(`with ${PLANTS} plants the last page costs no more than the first (keyset pagination)`, async (t) => {
      const database = await freshDatabase(t, store)
      await fill(database)
      const token = cli(database, ['tokens', 'create', '--name', 'bench']).stdout.trim()
      const server = await startServer(t, { ...database, token })

      const paths = ['/plants', `/plants?after=${PLANTS - 100}`, '/plants?tag=even', `/plants?tag=even&after=${PLANTS - 200}`]
      await medianMs(server, paths) // warm-up
      const [first, last, firstTagged, lastTagged] = await medianMs(server, paths)
      t.diagnostic(`median ms over ${SAMPLES} requests: first page ${first.toFixed(2)}, last page ${last.toFixed(2)}, first tagged ${firstTagged.toFixed(2)}, last tagged ${lastTagged.toFixed(2)}`)
      assert.ok(last <= 2 * first, `last page ${last} ms vs first ${first} ms`)
      assert.ok(lastTagged <= 2 * firstTagged, `last tagged page ${lastTagged} ms vs first ${firstTagged} ms`)
    })
  })
}

test("the store's list queries search the id B-tree or the tag index; none scans or sorts", (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const db = openDatabase(join(dir, 'plantstore.db'), { readonly: true })
  t.after(() => db.close())
  const plan = (sql: string): string => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...sql.split('?').slice(1).map(() => 1)) as Array<{ detail: string }>).map(r => r.detail).join('; ')
  assert.match(plan(LIST_SQL.first), /^SCAN plants$/, 'the first page walks the id B-tree from its start (LIMIT stops it)')
  assert.match(plan(LIST_SQL.after), /^SEARCH plants USING INTEGER PRIMARY KEY \(rowid>\?\)$/)
  assert.match(plan(LIST_SQL.tagFirst), /^SEARCH plants USING INDEX plants_tag_id \(tag=\?\)$/)
  assert.match(plan(LIST_SQL.tagAfter), /^SEARCH plants USING INDEX plants_tag_id \(tag=\? AND (row)?id>\?\)$/)
  for (const sql of Object.values(LIST_SQL)) assert.doesNotMatch(plan(sql), /TEMP B-TREE|OFFSET/i, sql)
})
