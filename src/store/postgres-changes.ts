// The change log's statements on PostgreSQL (SPEC section 9; docs/design.md "The change log").
// Every plant write does its work on the plant first, under the plant's row lock (so its
// condition and the logged tag are exact), and last takes the next position by updating
// change_log's one row, in the statement that logs the change. That row's lock is held to COMMIT:
// plant writes commit one at a time, in position order, so a reader that has read position N
// can never later find a smaller position filled in. Locks are always taken plant row first,
// head last (an import: the table, then the head), so writers never deadlock.
import type pg from 'pg'
import { commit } from './postgres-commit.js'
import { rowToPlant } from './postgres-rows.js'
import { DONE_WITH_BY_WEBHOOKS } from './webhooks.js'
import { isSamePlant, pageOf, readFrom, refusalOf, scanEnd, CHANGES_SCAN, type Change, type ChangesPage, type ChangeType, type Conditions, type Created, type LogBounds, type Plant, type PlantRecord, type VersionedPlant } from './store.js'

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
 * older, so that only a prefix of the log is ever dropped, whatever the instances' clocks said;
 * and only those webhooks no longer need.
 */
const PRUNE_SQL = `WITH oldest AS (SELECT position, at FROM changes WHERE ${DONE_WITH_BY_WEBHOOKS} ORDER BY position LIMIT $2),
  kept AS (SELECT min(position) AS position FROM oldest WHERE at >= $1)
DELETE FROM changes WHERE position IN (SELECT position FROM oldest WHERE position < coalesce((SELECT position FROM kept), 9223372036854775807))`

interface StoredRow { name: string, tag: string | null, version: bigint }
interface PageRow { head: bigint, floor: bigint, position: bigint | null, type: ChangeType, plant_id: bigint, name: string, tag: string | null, at: Date }

/**
 * Takes the next position and logs the change at it, in one statement: bumps the head (its row
 * lock is then held to COMMIT), makes the position the plant's version with its name and tag (a
 * deleted plant's row is gone already), and inserts the change.
 */
const LOG_SQL = `WITH bumped AS (UPDATE change_log SET head = head + 1 RETURNING head),
  versioned AS (UPDATE plants SET version = (SELECT head FROM bumped), name = $3, tag = $4 WHERE id = $2::int8)
INSERT INTO changes (position, type, plant_id, name, tag, tag_before) SELECT head, $1, $2::int8, $3, $4, $5 FROM bumped RETURNING position`

/** Logs `type` for `plant` (as the change leaves it) and answers its position, the plant's new version. */
async function logged (client: pg.ClientBase, type: ChangeType, plant: PlantRecord, tagBefore: string | null): Promise<bigint> {
  const { rows: [{ position }] } = await client.query<{ position: bigint }>(LOG_SQL, [type, plant.id.toString(), plant.name, plant.tag ?? null, tagBefore])
  return position
}

/**
 * Runs one plant write on `client` (taken from the pool for it) in a transaction: `work` answers
 * its outcome and whether it changed anything. Any failure rolls back by the caller dropping the
 * connection.
 */
async function write<T> (client: pg.ClientBase, work: () => Promise<{ changed: boolean, outcome: T }>): Promise<T> {
  await client.query('BEGIN')
  const { changed, outcome } = await work()
  if (!changed) await client.query(FENCE_SQL)
  await commit(client)
  return outcome
}

/**
 * What a write that changes nothing commits instead (its answer drawn from what others wrote: an
 * identical retry's 200, a 409, a 404): a WAL record, so that its COMMIT waits, as a change's does,
 * until the WAL and a synchronous standby hold everything it read. A write whose wait for the
 * standby was cancelled is visible on the primary before the standby has it: its retry must not
 * answer 200 before then, or a promotion of that standby loses an acknowledged write. A row lock
 * is written to the WAL (and takes a transaction id); KEY SHARE on the head's row waits for no
 * writer, as the writers' updates of the head do not wait for it.
 */
const FENCE_SQL = 'SELECT 1 FROM change_log FOR KEY SHARE'

const STORED_SQL = 'SELECT name, tag, version FROM plants WHERE id = $1::int8'

/** Inserts the plants not yet stored (version 0 is never seen: the log statement sets the position before the commit). */
const INSERT_MANY_SQL = `INSERT INTO plants (id, name, tag, version)
SELECT id, name, tag, 0 FROM unnest($1::int8[], $2::text[], $3::text[]) AS r (id, name, tag)
ON CONFLICT (id) DO NOTHING RETURNING id`

const STORED_MANY_SQL = 'SELECT id, name, tag, version FROM plants WHERE id = ANY($1::int8[])'

/**
 * LOG_SQL for several creates at once: the head taken once, a position for each, in the order
 * given. The plants' versions are set through their ids' index (= ANY), never by a join the
 * planner could answer with a scan of the table.
 */
const LOG_CREATED_SQL = `WITH bumped AS (UPDATE change_log SET head = head + cardinality($1::int8[]) RETURNING head - cardinality($1::int8[]) AS base),
  versioned AS (UPDATE plants SET version = bumped.base + array_position($1::int8[], plants.id) FROM bumped WHERE plants.id = ANY($1::int8[]))
INSERT INTO changes (position, type, plant_id, name, tag, tag_before)
SELECT bumped.base + r.n, 'plant.created', r.id, r.name, r.tag, NULL FROM bumped, unnest($1::int8[], $2::text[], $3::text[]) WITH ORDINALITY AS r (id, name, tag, n)
RETURNING position, plant_id`

/** The parameters of INSERT_MANY_SQL and LOG_CREATED_SQL: ids (as text, exact), names and tags, column by column. */
function columns (plants: readonly PlantRecord[]): [string[], string[], Array<string | null>] {
  return [plants.map(plant => plant.id.toString()), plants.map(plant => plant.name), plants.map(plant => plant.tag ?? null)]
}

/** A create to run again: its id was taken when inserted, and free when read (the plant deleted in between). */
export type CreatedOrAgain = Created | 'again'

/**
 * Creates `plants` (distinct ids, in ascending order, so that concurrent batches lock their rows
 * in one order and never deadlock) in one transaction: those whose id is free are inserted and
 * logged, with the head taken once for all; the others are answered from the stored plant.
 * Throws a unique violation when an index other than the id's (one an operator added) refuses
 * one: nothing is stored then.
 */
export async function createMany (client: pg.ClientBase, plants: readonly PlantRecord[]): Promise<CreatedOrAgain[]> {
  return await write<CreatedOrAgain[]>(client, async () => {
    const { rows: inserted } = await client.query<{ id: bigint }>(INSERT_MANY_SQL, columns(plants))
    const isNew = new Set(inserted.map(row => row.id))
    const fresh = plants.filter(plant => isNew.has(plant.id))
    const taken = plants.filter(plant => !isNew.has(plant.id))
    const stored = taken.length === 0
      ? new Map<bigint, StoredRow>()
      : new Map((await client.query<StoredRow & { id: bigint }>(STORED_MANY_SQL, [taken.map(plant => plant.id.toString())])).rows.map(row => [row.id, row]))
    const positions = fresh.length === 0
      ? new Map<bigint, bigint>()
      : new Map((await client.query<{ position: bigint, plant_id: bigint }>(LOG_CREATED_SQL, columns(fresh))).rows.map(row => [row.plant_id, row.position]))
    const outcomes = plants.map((plant): CreatedOrAgain => {
      const position = positions.get(plant.id)
      if (position !== undefined) return { outcome: 'created', version: position }
      const row = stored.get(plant.id)
      if (row === undefined) return 'again'
      return { outcome: isSamePlant(row, plant) ? 'same' : 'conflict', version: row.version }
    })
    return { changed: fresh.length > 0, outcome: outcomes }
  })
}

/** The plant as stored now, its row locked to the end of the transaction (no other write changes it meanwhile). */
async function locked (client: pg.ClientBase, id: bigint): Promise<StoredRow | undefined> {
  return (await client.query<StoredRow>(`${STORED_SQL} FOR UPDATE`, [id.toString()])).rows[0]
}

export async function replacePlant (client: pg.ClientBase, id: bigint, plant: Plant, conditions?: Conditions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'> {
  return await write<VersionedPlant | 'not-found' | 'precondition-failed'>(client, async () => {
    const stored = await locked(client, id)
    const refusal = refusalOf(stored?.version, conditions)
    if (refusal !== undefined || stored === undefined) return { changed: false, outcome: refusal ?? 'not-found' }
    const record = rowToPlant({ id, name: plant.name, tag: plant.tag ?? null })
    return { changed: true, outcome: { plant: record, version: await logged(client, 'plant.updated', record, stored.tag) } }
  })
}

export async function removePlant (client: pg.ClientBase, id: bigint, conditions?: Conditions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'> {
  return await write<{ position: bigint } | 'not-found' | 'precondition-failed'>(client, async () => {
    const stored = await locked(client, id)
    const refusal = refusalOf(stored?.version, conditions)
    if (refusal !== undefined || stored === undefined) return { changed: false, outcome: refusal ?? 'not-found' }
    await client.query('DELETE FROM plants WHERE id = $1::int8', [id.toString()])
    return { changed: true, outcome: { position: await logged(client, 'plant.deleted', rowToPlant({ id, name: stored.name, tag: stored.tag }), stored.tag) } }
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
    position: row.position!, type: row.type, plant: rowToPlant({ id: row.plant_id, name: row.name, tag: row.tag }), at: row.at
  }))
  return pageOf(changes, limit, from, scanEnd(from, rows[0].head))
}

export async function pruneChanges (client: pg.ClientBase | pg.Pool, before: Date, batch: number): Promise<number> {
  return (await client.query(PRUNE_SQL, [before, batch])).rowCount ?? 0
}
