import Database from 'better-sqlite3'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import { test } from 'node:test'
import { LIST_SQL } from '../../src/store/sqlite.js'
import { call, cli, startServer, tempDir, type Server } from '../helpers.js'

const PLANTS = 100_000
const SAMPLES = 60

/** Median wall time of `SAMPLES` GETs of `path`, in milliseconds. */
async function medianMs (server: Server, path: string): Promise<number> {
  const times = []
  for (let i = 0; i < SAMPLES; i++) {
    const start = process.hrtime.bigint()
    const answer = await call(server, 'GET', path)
    times.push(Number(process.hrtime.bigint() - start) / 1e6)
    assert.equal(answer.status, 200)
    assert.equal(answer.body.length, 100)
  }
  return times.sort((a, b) => a - b)[SAMPLES >> 1]
}

test(`with ${PLANTS} plants the last page costs no more than the first (keyset pagination)`, async (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const db = new Database(join(dir, 'plantstore.db'))
  const insert = db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)')
  db.transaction(() => { for (let id = 1; id <= PLANTS; id++) insert.run(id, `plant ${id}`, id % 2 === 0 ? 'even' : null) })()
  db.close()
  const token = cli(dir, ['tokens', 'create', '--name', 'bench']).stdout.trim()
  const server = await startServer(t, { dir, token })

  await medianMs(server, '/plants') // warm-up
  const first = await medianMs(server, '/plants')
  const last = await medianMs(server, `/plants?after=${PLANTS - 100}`)
  const firstTagged = await medianMs(server, '/plants?tag=even')
  const lastTagged = await medianMs(server, `/plants?tag=even&after=${PLANTS - 200}`)
  t.diagnostic(`median ms over ${SAMPLES} requests: first page ${first.toFixed(2)}, last page ${last.toFixed(2)}, first tagged ${firstTagged.toFixed(2)}, last tagged ${lastTagged.toFixed(2)}`)
  assert.ok(last <= 2 * first, `last page ${last} ms vs first ${first} ms`)
  assert.ok(lastTagged <= 2 * firstTagged, `last tagged page ${lastTagged} ms vs first ${firstTagged} ms`)
})

test("the store's list queries search the id B-tree or the tag index; none scans or sorts", (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const db = new Database(join(dir, 'plantstore.db'), { readonly: true })
  t.after(() => db.close())
  const plan = (sql: string): string => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...sql.split('?').slice(1).map(() => 1)) as Array<{ detail: string }>).map(r => r.detail).join('; ')
  assert.match(plan(LIST_SQL.first), /^SCAN plants$/, 'the first page walks the id B-tree from its start (LIMIT stops it)')
  assert.match(plan(LIST_SQL.after), /^SEARCH plants USING INTEGER PRIMARY KEY \(rowid>\?\)$/)
  assert.match(plan(LIST_SQL.tagFirst), /^SEARCH plants USING INDEX plants_tag_id \(tag=\?\)$/)
  assert.match(plan(LIST_SQL.tagAfter), /^SEARCH plants USING INDEX plants_tag_id \(tag=\? AND (row)?id>\?\)$/)
  for (const sql of Object.values(LIST_SQL)) assert.doesNotMatch(plan(sql), /TEMP B-TREE|OFFSET/i, sql)
})
