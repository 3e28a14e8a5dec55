import { chmodSync, closeSync, existsSync, fstatSync, mkdirSync, openSync, readSync } from 'node:fs'
import { dirname } from 'node:path'

/** Owner only: plants and token digests are nobody else's to read. */
const PRIVATE_FILE = 0o600
const PRIVATE_DIRECTORY = 0o700
/** How every SQLite database file begins. */
const SQLITE_HEADER = Buffer.from('SQLite format 3\0')

/**
 * Makes the database's directory and files private before SQLite opens them. A directory that
 * does not exist yet is created 0700; one that exists is the operator's choice (it may be /tmp)
 * and stays as it is. The database file is created 0600, or tightened to 0600 if it exists.
 * SQLite creates its -wal and -shm files with the database file's mode, so they are 0600 too;
 * ones an older version left are tightened as well. A path that holds anything but an empty
 * file or a SQLite database (a device, a text file) is refused before anything is changed: a
 * start that fails leaves it as it was.
 */
export function makePrivate (path: string): void {
  makeDirectory(dirname(path))
  refuseNonDatabase(path)
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

/** Creates an empty file at `path` (SQLite takes it for a new database), or throws if what is there is no database. */
function refuseNonDatabase (path: string): void {
  let fd: number
  try {
    fd = openSync(path, 'a+', PRIVATE_FILE) // opened to create and read, never written
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EISDIR') throw new Error('it is not a regular file')
    throw error
  }
  try {
    const stats = fstatSync(fd)
    if (!stats.isFile()) throw new Error('it is not a regular file')
    const head = Buffer.alloc(SQLITE_HEADER.length)
    if (stats.size > 0 && (readSync(fd, head, 0, head.length, 0) < head.length || !head.equals(SQLITE_HEADER))) {
      throw new Error('file is not a database') // SQLite's words for it
    }
  } finally {
    closeSync(fd)
  }
}

/**
 * Creates `dir` 0700 with the parents it lacks. Not mkdirSync's `recursive`: where mkdir answers
 * ENOENT below a parent that exists (/proc), Node 20's tries again for ever; here that is thrown.
 */
function makeDirectory (dir: string): void {
  try {
    madeOrThere(dir)
  } catch (error) {
    const parent = dirname(dir)
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT' || parent === dir) throw error
    // The parent is missing, or was until another process made it a moment ago.
    if (!existsSync(parent)) makeDirectory(parent)
    madeOrThere(dir) // once more, now that the parent is there: a failure is thrown
  }
}

/** Makes `dir` 0700; one already there is fine (made by another process meanwhile; a file there fails as the database is opened). */
function madeOrThere (dir: string): void {
  try {
    mkdirSync(dir, { mode: PRIVATE_DIRECTORY })
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
  }
}
