import { ConfigError, isPostgresUrl } from '../config.js'
import { PostgresStore } from './postgres.js'
import { describe } from './describe.js'
import { SqliteStore } from './sqlite.js'
import type { Store } from './store.js'

/** `cause` as the end of a sentence: one full stop, whether or not the cause brought its own. */
const ending = (cause: string): string => `${cause.replace(/\.$/, '')}.`

/**
 * Opens the store that `databaseUrl` names, creating and migrating it if needed: PostgreSQL for
 * a `postgres://` or `postgresql://` URL, else a SQLite file. Asynchronous because PostgreSQL's
 * connect and migration are.
 */
export async function openStore (databaseUrl: string): Promise<Store> {
  if (isPostgresUrl(databaseUrl)) {
    try {
      return await PostgresStore.open(databaseUrl)
    } catch (error) {
      // The URL may hold a password: the line names the cause, not the URL.
      throw new ConfigError(`Cannot open the PostgreSQL database in DATABASE_URL: ${ending(describe(error))}`)
    }
  }
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
