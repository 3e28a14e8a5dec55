import { resolve } from 'node:path'
import { ConfigError, ending, isPostgresUrl } from '../config.js'
import { sqlstateOf } from './postgres-errors.js'
import { NoStoreError } from './postgres-schema.js'
import { describe } from './describe.js'
import { storeAt } from './sqlite-schema.js'
import { newestVersion, tooNew } from './migrations.js'
import { SqliteStore } from './sqlite.js'
import { exportSqlite } from './sqlite-transfer.js'
import type { PlantRecord, Store } from './store.js'

/** There is no store where a command that only reads (`create: false`) was pointed: nothing was created. */
export class NoStoreHereError extends ConfigError {}

/**
 * Opens the store that `databaseUrl` names, creating and migrating it if needed: PostgreSQL for
 * a `postgres://` or `postgresql://` URL, else a SQLite file. Asynchronous because PostgreSQL's
 * connect and migration are. With `create: false`, where there is no store (a missing or empty
 * file, a database without plantstore's tables), it is a NoStoreHereError, and nothing is
 * created; a store of an older version is migrated as always.
 */
export async function openStore (databaseUrl: string, { create = true }: { create?: boolean } = {}): Promise<Store> {
  if (isPostgresUrl(databaseUrl)) {
    // Loaded only here, outside the try (a broken install is no database's fault): a SQLite service never loads the PostgreSQL client.
    const { PostgresStore } = await import('./postgres.js')
    try {
      return await PostgresStore.open(databaseUrl, {}, { create })
    } catch (error) {
      // The URL may hold a password: the line names the cause, not the URL.
      if (error instanceof NoStoreError) throw new NoStoreHereError('There is no store in the PostgreSQL database in DATABASE_URL (its search_path holds no plantstore tables).')
      // No schema to create the tables in: the search_path names only schemas that do not exist.
      if (sqlstateOf(error) === '3F000') throw new ConfigError('Cannot open the PostgreSQL database in DATABASE_URL: its search_path names no schema that exists; create it first (CREATE SCHEMA name) or fix the search_path option.')
      throw new ConfigError(`Cannot open the PostgreSQL database in DATABASE_URL: ${ending(describe(error))}`)
    }
  }
  if (!create) requireSqliteStore(databaseUrl)
  try {
    return new SqliteStore(databaseUrl)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? ''
    const reason = ['EACCES', 'EPERM', 'EROFS', 'ENOTDIR', 'SQLITE_CANTOPEN', 'SQLITE_READONLY'].includes(code)
      ? 'the directory is not writable or the file cannot be created'
      : (error as Error).message
    throw new ConfigError(`Cannot open the database at ${databaseUrl}: ${ending(reason)}`)
  }
}

/** Refuses a path without a store, and a store of a newer plantstore (whose schema this one would only guess at). */
function requireSqliteStore (path: string): void {
  const version = storeAt(path)
  if (typeof version !== 'number') throw new ConfigError(version.unreadable)
  if (version === 0) throw new NoStoreHereError(`There is no store at ${resolve(path)}.`)
  const newest = newestVersion('sqlite')
  if (version > newest) throw new ConfigError(`Cannot open the database at ${path}: ${ending(tooNew(version, newest).message)}`)
}

/**
 * Every plant of the store at `databaseUrl`, a page at a time, from one snapshot (see
 * Store.exportPlants); nothing is created. A SQLite file is only read, never opened for writing:
 * it may be a backup, whose journal mode, bytes and mode stay as they are, or on read-only media.
 */
export async function * exportFrom (databaseUrl: string): AsyncGenerator<PlantRecord[]> {
  if (!isPostgresUrl(databaseUrl)) {
    requireSqliteStore(databaseUrl)
    yield * exportSqlite(databaseUrl)
    return
  }
  const store = await openStore(databaseUrl, { create: false })
  try {
    yield * store.exportPlants()
  } finally {
    await store.close()
  }
}
