import { ConfigError, isPostgresUrl } from '../config.js'
import { SqliteStore } from './sqlite.js'
import type { Store } from './store.js'

/** Opens the store that `databaseUrl` names, creating and migrating it if needed. */
export function openStore (databaseUrl: string): Store {
  if (isPostgresUrl(databaseUrl)) {
    throw new ConfigError('DATABASE_URL names PostgreSQL, which this version of plantstore cannot use yet; give a SQLite file path.')
  }
  try {
    return new SqliteStore(databaseUrl)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? ''
    const reason = ['EACCES', 'EPERM', 'EROFS', 'ENOTDIR', 'SQLITE_CANTOPEN', 'SQLITE_READONLY'].includes(code)
      ? 'the directory is not writable or the file cannot be created'
      : (error as Error).message
    throw new ConfigError(`Cannot open the database at ${databaseUrl}: ${reason}.`)
  }
}
