// The change log's statements on PostgreSQL (SPEC section 9; docs/design.md "The change log").
// Every plant write runs in a transaction that first takes the next position by updating
// change_log's one row: the row's lock then makes plant writes commit one at a time, in position
// order, so a reader that has read position N can never later find a smaller position filled in.
// Every later statement of the transaction runs with a snapshot taken after the lock was granted:
// it sees every change committed before, so conditions and the logged tag are exact.
import type pg from 'pg'
import { isUniqueViolation } from './postgres-errors.js'
import { meets, pageOf, readFrom, scanEnd, CHANGES_SCAN, type Change, type ChangesPage, type ChangeType, type Created, type LogBounds, type Plant, type PlantRecord, type Versions, type VersionedPlant } from './store.js'

/**
 * Begins a plant write and takes its position, in one round trip (a simple query holds both
 * statements). A write that then changes nothing rolls back, and its position is handed out again.
 */
const BEGIN_WRITE_SQL = 'BEGIN; UPDATE change_log SET head = head + 1 RETURNING head'

/** The head and the floor (positions at or below it are gone), in one snapshot. */
const BOUNDS_SQL = 'SELECT head, coalesce((SELECT min(position) - 1 FROM changes), head) AS floor FROM change_log'

/**
 * One page of the log with the bounds, in one statement, so one snapshot: positions after $1
 * (the floor when null), within CHANGES_SCAN of it, with the tag $2 before or after (any when null).
 */
const PAGE_SQL = `WITH bounds AS (${BOUNDS_SQL})
SELECT bounds.head, bounds.floor, c.position, c.type, c.plant_id, c.name, c.tag, c.at
FROM bounds LEFT JOIN LATERAL (
  SELECT * FROM changes
  WHERE position > coalesce($1::int8, bounds.floor)
    -- From beyond the head the read is gone anyway; bounding by the head keeps the sum within int8.
    AND position <= least(coalesce($1::int8, bounds.floor), bounds.head) + ${CHANGES_SCAN}
    AND ($2::text IS NULL OR tag = $2 OR tag_before = $2)
  ORDER BY position LIMIT $3
) c ON true`

/**
 * Drops the oldest changes made before $1, at most $2: the leading run of the oldest $2 that are
 * older, so that only a prefix of the log is ever dropped, whatever the instances' clocks said.
 */
const PRUNE_SQL = `WITH oldest AS (SELECT position, at FROM changes ORDER BY position LIMIT $2),
  kept AS (SELECT min(position) AS position FROM oldest WHERE at >= $1)
DELETE FROM changes WHERE position IN (SELECT position FROM oldest WHERE position < coalesce((SELECT position FROM kept), 9223372036854775807))`

interface StoredRow { name: string, tag: string | null, version: bigint }
interface PageRow { head: bigint, floor: bigint, position: bigint | null, type: ChangeType, plant_id: bigint, name: string, tag: string | null, at: Date }

const plantOf = (id: bigint, name: string, tag: string | null): PlantRecord => tag === null ? { id, name } : { id, name, tag }

/** Writes the change at `position` and makes it the plant's version (the row of a delete is gone already). */
async function log (client: pg.ClientBase, position: bigint, type: ChangeType, plant: PlantRecord, tagBefore: string | null): Promise<void> {
  const id = plant.id.toString()
  await client.query(`WITH versioned AS (UPDATE plants SET version = $1 WHERE id = $3::int8)
    INSERT INTO changes (position, type, plant_id, name, tag, tag_before) VALUES ($1, $2, $3::int8, $4, $5, $6)`,
  [position, type, id, plant.name, plant.tag ?? null, tagBefore])
}

/**
 * Runs one plant write on `client` (taken from the pool for it): `work` gets the position the
 * write takes if it changes something, and returns its outcome and whether it changed anything.
 * COMMIT if it did, else ROLLBACK. Any failure rolls back by the caller dropping the connection.
 */
async function write<T> (client: pg.ClientBase, work: (position: bigint) => Promise<{ changed: boolean, outcome: T }>): Promise<T> {
  const [, bumped] = await client.query(BEGIN_WRITE_SQL) as unknown as [pg.QueryResult, pg.QueryResult<{ head: bigint }>]
  const { changed, outcome } = await work(bumped.rows[0].head)
  await client.query(changed ? 'COMMIT' : 'ROLLBACK')
  return outcome
}

const STORED_SQL = 'SELECT name, tag, version FROM plants WHERE id = $1::int8'

export async function createPlant (client: pg.ClientBase, plant: PlantRecord): Promise<Created> {
  return await write<Created>(client, async (position) => {
    const tag = plant.tag ?? null
    let inserted: pg.QueryResult
    try {
      inserted = await client.query('INSERT INTO plants (id, name, tag, version) VALUES ($1::int8, $2, $3, $4) ON CONFLICT (id) DO NOTHING', [plant.id.toString(), plant.name, tag, position])
    } catch (error) {
      // A unique index other than the id's (one an operator added) refuses the plant: a conflict, rolled back.
      if (isUniqueViolation(error)) return { changed: false, outcome: { outcome: 'conflict' } }
      throw error
    }
    if (inserted.rowCount === 1) {
      await log(client, position, 'plant.created', plant, null)
      return { changed: true, outcome: { outcome: 'created', version: position } }
    }
    // No plant writer commits while this one holds the head, so the plant seen now stays as it is.
    const { rows: [stored] } = await client.query<StoredRow>(STORED_SQL, [plant.id.toString()])
    const same = stored.name === plant.name && stored.tag === tag
    return { changed: false, outcome: { outcome: same ? 'same' : 'conflict', version: stored.version } }
  })
}

/** Why a conditional write on a plant that is missing or at another version did nothing. */
function refusal (stored: StoredRow | undefined, ifMatch: Versions | undefined): 'not-found' | 'precondition-failed' {
  return stored === undefined && ifMatch === undefined ? 'not-found' : 'precondition-failed'
}

export async function replacePlant (client: pg.ClientBase, id: bigint, plant: Plant, ifMatch?: Versions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'> {
  return await write<VersionedPlant | 'not-found' | 'precondition-failed'>(client, async (position) => {
    const { rows: [stored] } = await client.query<StoredRow>(STORED_SQL, [id.toString()])
    if (stored === undefined || !meets(ifMatch, stored.version)) return { changed: false, outcome: refusal(stored, ifMatch) }
    const record = plantOf(id, plant.name, plant.tag ?? null)
    await client.query('UPDATE plants SET name = $2, tag = $3 WHERE id = $1::int8', [id.toString(), plant.name, plant.tag ?? null])
    await log(client, position, 'plant.updated', record, stored.tag)
    return { changed: true, outcome: { plant: record, version: position } }
  })
}

export async function removePlant (client: pg.ClientBase, id: bigint, ifMatch?: Versions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'> {
  return await write<{ position: bigint } | 'not-found' | 'precondition-failed'>(client, async (position) => {
    const { rows: [stored] } = await client.query<StoredRow>(STORED_SQL, [id.toString()])
    if (stored === undefined || !meets(ifMatch, stored.version)) return { changed: false, outcome: refusal(stored, ifMatch) }
    await client.query('DELETE FROM plants WHERE id = $1::int8', [id.toString()])
    await log(client, position, 'plant.deleted', plantOf(id, stored.name, stored.tag), stored.tag)
    return { changed: true, outcome: { position } }
  })
}

export async function logBounds (client: pg.ClientBase | pg.Pool): Promise<LogBounds> {
  const { rows: [row] } = await client.query<LogBounds>(BOUNDS_SQL)
  return row
}

export async function changesPage (client: pg.ClientBase | pg.Pool, { after, limit, tag }: { after?: bigint, limit: number, tag?: string }): Promise<ChangesPage> {
  // No stored tag holds U+0000, which PostgreSQL refuses as a parameter: such a tag matches nothing, so no row is asked for.
  const matchesNone = tag?.includes('\u0000') === true
  const { rows } = await client.query<PageRow>(PAGE_SQL, [after?.toString() ?? null, matchesNone ? null : tag ?? null, matchesNone ? 0 : limit])
  const from = readFrom(after, rows[0])
  if (from === 'gone') return from
  const changes: Change[] = rows.filter(row => row.position !== null).map(row => ({
    position: row.position!, type: row.type, plant: plantOf(row.plant_id, row.name, row.tag), at: row.at
  }))
  return pageOf(changes, limit, scanEnd(from, rows[0].head))
}

export async function pruneChanges (client: pg.ClientBase | pg.Pool, before: Date, batch: number): Promise<number> {
  return (await client.query(PRUNE_SQL, [before, batch])).rowCount ?? 0
}
