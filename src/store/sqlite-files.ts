import { chmodSync, closeSync, mkdirSync, openSync } from 'node:fs'
import { dirname } from 'node:path'

/** Owner only: plants and token digests are nobody else's to read. */
const PRIVATE_FILE = 0o600
const PRIVATE_DIRECTORY = 0o700

/**
 * Makes the database's directory and files private before SQLite opens them. A directory that
 * does not exist yet is created 0700; one that exists is the operator's choice (it may be /tmp)
 * and stays as it is. The database file is created 0600, or tightened to 0600 if it exists.
 * SQLite creates its -wal and -shm files with the database file's mode, so they are 0600 too;
 * ones an older version left are tightened as well.
 */
export function makePrivate (path: string): void {
  mkdirSync(dirname(path), { recursive: true, mode: PRIVATE_DIRECTORY })
  closeSync(openSync(path, 'a', PRIVATE_FILE)) // SQLite takes an empty file for a new database
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      chmodSync(file, PRIVATE_FILE)
    } catch (error) {
      // No such file (no WAL yet), or another user's file, which SQLite may still open.
      const code = (error as NodeJS.ErrnoException).code
      if (code !== 'ENOENT' && code !== 'EPERM') throw error
    }
  }
}
