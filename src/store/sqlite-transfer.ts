import type Database from 'better-sqlite3'
import { StoreUnavailableError } from '../errors.js'
import { describe } from './describe.js'
import { openDatabase } from './sqlite-driver.js'
import { isUnavailable } from './sqlite-errors.js'
import { LIST_SQL, rowToPlant, type PlantRow } from './sqlite-rows.js'
import { plantCreator } from './sqlite-writes.js'
import { configure } from './sqlite-schema.js'
import { EXPORT_PAGE, keysetPages, type ImportOutcome, type PlantRecord } from './store.js'

/** Storage trouble as the store's StoreUnavailableError; the rest, the source's own errors included, pass on. */
function failureOf (error: unknown): unknown {
  return isUnavailable(error) ? new StoreUnavailableError(describe(error)) : error
}

/** A connection of the transfer's own; it may wait for locks (5 s), unlike the service's. */
function connect (path: string, readonly: boolean): Database.Database {
  try {
    const db = openDatabase(path, { readonly, fileMustExist: true })
    configure(db)
    return db
  } catch (error) {
    throw failureOf(error)
  }
}

/**
 * Every plant in id order, a page at a time, from the store at `path`: one read transaction on a
 * read-only connection of its own, so every page comes from the snapshot the first one took,
 * while (in WAL mode) other connections go on writing.
 */
export async function * exportSqlite (path: string): AsyncGenerator<PlantRecord[]> {
  const db = connect(path, true)
  try {
    const first = db.prepare(LIST_SQL.first).raw()
    const next = db.prepare(LIST_SQL.after).raw()
    db.exec('BEGIN')
    yield * keysetPages(after => ((after === undefined ? first.all(EXPORT_PAGE) : next.all(after, EXPORT_PAGE)) as PlantRow[]).map(rowToPlant))
    db.exec('COMMIT')
  } catch (error) {
    throw failureOf(error)
  } finally {
    db.close() // also ends the read transaction of an export stopped early
  }
}

/**
 * Stores every plant of `source` in one transaction on a connection of its own (see
 * Store.importPlants): BEGIN IMMEDIATE takes the write lock at once, so the store stays empty
 * but for the import, and COMMIT syncs (synchronous = FULL). A row at a time through one
 * prepared statement: in SQLite, multi-row statements save nothing but parsing, which this
 * does once. A plant whose id is taken is compared with the stored one.
 */
export async function importSqlite (path: string, source: AsyncIterable<PlantRecord[]>, { replace }: { replace: boolean }): Promise<ImportOutcome> {
  const db = connect(path, false)
  try {
    const create = plantCreator(db)
    db.exec('BEGIN IMMEDIATE')
    if (replace) db.exec('DELETE FROM plants')
    else if (db.prepare('SELECT 1 FROM plants LIMIT 1').get() !== undefined) return { outcome: 'not-empty' }
    // The change log starts anew above its head; every imported plant's version is the new head.
    const version = db.prepare('UPDATE change_log SET head = head + 1 RETURNING head').pluck().get() as bigint
    db.exec('DELETE FROM changes')
    let at = 0
    let plants = 0
    for await (const batch of source) {
      for (const plant of batch) {
        const { outcome } = create(plant.id, plant.name, plant.tag ?? null, version)
        if (outcome === 'conflict') return { outcome, at }
        if (outcome === 'created') plants++
        at++
      }
    }
    db.exec('COMMIT')
    return { outcome: 'imported', plants }
  } catch (error) {
    throw failureOf(error)
  } finally {
    if (db.inTransaction) db.exec('ROLLBACK')
    db.close()
  }
}
