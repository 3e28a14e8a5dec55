import type pg from 'pg'
import { StoreUnavailableError } from '../errors.js'
import { describe } from './describe.js'
import { commit } from './postgres-commit.js'
import { isUnavailable, sqlstateOf } from './postgres-errors.js'
import { PAGE_SQL, rowToPlant, unstorable, type PlantRow } from './postgres-rows.js'
import { EXPORT_PAGE, isSamePlant, keysetPages, type ImportOutcome, type PlantRecord } from './store.js'

/** How long an import waits for writers already under way to finish before it takes the table. */
const LOCK_TIMEOUT = '5s'

/** Every batch is one INSERT of three arrays, whatever its size: one plan, no parameter limit. */
const INSERT_SQL = 'INSERT INTO plants (id, name, tag, version) SELECT *, $4::int8 FROM unnest($1::int8[], $2::text[], $3::text[]) ON CONFLICT (id) DO NOTHING'

/** The database's failures as the store's: out of reach (or the table held too long) is StoreUnavailableError; the rest, the source's own errors included, pass on. */
function failureOf (error: unknown): unknown {
  if (sqlstateOf(error) === '55P03') return new StoreUnavailableError(`Another session kept the plants table locked for over ${LOCK_TIMEOUT}; try again.`)
  return isUnavailable(error) ? new StoreUnavailableError(describe(error)) : error
}

/**
 * Every plant in id order, a page at a time, from one REPEATABLE READ snapshot on a connection
 * of its own (from `connect`, ended here).
 */
export async function * exportPostgres (connect: () => Promise<pg.Client>): AsyncGenerator<PlantRecord[]> {
  let client: pg.Client | undefined
  try {
    const reader = client = await connect()
    await reader.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY')
    yield * keysetPages(async after => (after === undefined
      ? await reader.query<PlantRow>(PAGE_SQL.first, [EXPORT_PAGE])
      : await reader.query<PlantRow>(PAGE_SQL.after, [after.toString(), EXPORT_PAGE])).rows.map(rowToPlant))
    await reader.query('COMMIT')
  } catch (error) {
    throw failureOf(error)
  } finally {
    await client?.end().catch(() => {})
  }
}

/** The position in `batch` of the first plant that differs from the one stored under its id, or -1. */
async function firstConflict (client: pg.Client, batch: PlantRecord[]): Promise<number> {
  const { rows } = await client.query<PlantRow>('SELECT id, name, tag FROM plants WHERE id = ANY($1::int8[])', [batch.map(plant => plant.id.toString())])
  const stored = new Map(rows.map(row => [row.id, row]))
  return batch.findIndex(plant => {
    const row = stored.get(plant.id)
    return row === undefined || !isSamePlant(row, plant)
  })
}

/**
 * Stores every plant of `source` in one transaction, on a connection of its own (from
 * `connect`, ended here; see Store.importPlants). The table is locked against other writers (EXCLUSIVE:
 * reads go on) so that it stays empty but for the import. A batch that stores fewer rows than
 * it holds repeats ids: then each of its plants is compared with what its id holds.
 */
export async function importPostgres (connect: () => Promise<pg.Client>, source: AsyncIterable<PlantRecord[]>, { replace }: { replace: boolean }): Promise<ImportOutcome> {
  let client: pg.Client | undefined
  try {
    client = await connect()
    await client.query('BEGIN')
    await client.query(`SET LOCAL lock_timeout = '${LOCK_TIMEOUT}'`)
    // The table first, then the change log's head, in the order every plant write takes its
    // locks (the plant's row, then the head: postgres-changes.ts), so that none deadlocks.
    // The log starts anew above its head; every imported plant's version is the new head.
    await client.query('LOCK TABLE plants IN EXCLUSIVE MODE')
    const { rows: [{ head }] } = await client.query<{ head: bigint }>('UPDATE change_log SET head = head + 1 RETURNING head')
    await client.query('DELETE FROM changes')
    if (replace) await client.query('DELETE FROM plants')
    else if ((await client.query('SELECT 1 FROM plants LIMIT 1')).rows.length > 0) return await rollback(client, { outcome: 'not-empty' })
    let at = 0
    let plants = 0
    for await (const batch of source) {
      const refused = batch.findIndex(plant => unstorable(plant) !== undefined)
      if (refused !== -1) return await rollback(client, { outcome: 'unstorable', at: at + refused, reason: unstorable(batch[refused])!.message })
      const { rowCount } = await client.query(INSERT_SQL, [
        batch.map(plant => plant.id.toString()), batch.map(plant => plant.name), batch.map(plant => plant.tag ?? null), head])
      plants += rowCount ?? 0
      if ((rowCount ?? 0) < batch.length) {
        const conflict = await firstConflict(client, batch)
        if (conflict !== -1) return await rollback(client, { outcome: 'conflict', at: at + conflict })
      }
      at += batch.length
    }
    await commit(client)
    return { outcome: 'imported', plants }
  } catch (error) {
    await client?.query('ROLLBACK').catch(() => {})
    throw failureOf(error)
  } finally {
    await client?.end().catch(() => {})
  }
}

async function rollback (client: pg.Client, outcome: ImportOutcome): Promise<ImportOutcome> {
  await client.query('ROLLBACK')
  return outcome
}
