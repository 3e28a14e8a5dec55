import { closeSync, existsSync, fsyncSync, linkSync, openSync, readdirSync, realpathSync, rmSync, statSync } from 'node:fs'
import { basename, dirname, join, resolve } from 'node:path'
import { ConfigError } from '../config.js'
import { openDatabase } from './sqlite-driver.js'
import { storeAt } from './sqlite-schema.js'

/** Pages a backup step copies (4 MiB of 4 KiB pages): between two, the command sees a signal to stop. */
const STEP_PAGES = 1024

function fsyncPath (path: string): void {
  const fd = openSync(path, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

/**
 * Copies the SQLite store at `source` to `destination` while other processes keep writing to
 * it, with SQLite's online backup: the copy is the store as of one committed moment. The copy
 * is a self-contained database in rollback-journal mode (no -wal file belongs to it), readable
 * by its owner only, and synced to disk. It is written under a temporary name beside
 * `destination` and linked into place at the end, so `destination` is never overwritten and
 * never seen half-written. Throws a ConfigError of one line when it cannot be made.
 */
export async function backupSqlite (source: string, destination: string): Promise<void> {
  const found = storeAt(source)
  if (typeof found !== 'number') throw new ConfigError(found.unreadable)
  if (found === 0) throw new ConfigError(`There is no store at ${resolve(source)} to back up.`)
  if (/[/\\]$/.test(destination) || isDirectory(destination)) throw new ConfigError(`The backup's FILE ${destination} names a directory; name the file to write.`)
  // SQLite takes a file so named for the store's own: a -journal beside it, found at the next open, is rolled back into it and deleted.
  if (['-journal', '-wal', '-shm'].some(suffix => realPath(destination) === realPath(source) + suffix)) {
    throw new ConfigError(`${resolve(destination)} is a name SQLite keeps for the store's own files; choose another.`)
  }
  if (existsSync(destination)) throw new ConfigError(`${resolve(destination)} already exists; a backup never overwrites a file, so remove it or choose another name.`)
  removeAbandoned(destination)
  const partial = partialOf(destination)
  try {
    closeSync(openSync(partial, 'wx', 0o600)) // SQLite keeps the mode of a file it finds
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code === 'ENOENT' ? 'the directory does not exist' : 'the directory is not writable'
    throw new ConfigError(`Cannot write the backup ${resolve(destination)}: ${reason}.`)
  }
  try {
    const store = openDatabase(source, { readonly: true, fileMustExist: true })
    try {
      store.pragma('busy_timeout = 5000')
      // One read transaction across the steps: the copy is one snapshot. Without it, each step
      // reads the store as it is then, and a write by another process between two restarts the
      // copy (for ever, under steady writes).
      store.exec('BEGIN')
      store.prepare('SELECT 1 FROM sqlite_schema').get()
      await store.backup(partial, { progress: () => STEP_PAGES })
    } finally {
      store.close()
    }
    const copy = openDatabase(partial, { fileMustExist: true }) // gone if a stop removed it meanwhile: never made anew, empty
    try {
      copy.pragma('journal_mode = DELETE') // the store's WAL flag came along with its first page
    } finally {
      copy.close()
    }
    fsyncPath(partial)
    linkSync(partial, destination) // fails if `destination` appeared meanwhile: still not overwritten
    fsyncPath(dirname(resolve(destination)))
  } catch (error) {
    if (error instanceof ConfigError) throw error
    const reason = (error as NodeJS.ErrnoException).code === 'EEXIST' ? 'it appeared while the backup ran' : (error as Error).message
    throw new ConfigError(`Cannot write the backup ${resolve(destination)}: ${reason}.`)
  } finally {
    removePartial(destination)
  }
}

/** `path` with its directory's symbolic links resolved (the file itself may not exist yet). */
function realPath (path: string): string {
  try {
    return join(realpathSync(dirname(resolve(path))), basename(path))
  } catch {
    return resolve(path)
  }
}

function isDirectory (path: string): boolean {
  try {
    return statSync(path).isDirectory()
  } catch {
    return false
  }
}

/** The temporary name a backup to `destination` is written under, beside it, until it is whole. */
function partialOf (destination: string): string {
  return join(dirname(destination), `.${basename(destination)}.partial-${process.pid}`)
}

/**
 * Removes what backups to `destination` killed part way (`kill -9`: no cleanup runs) left under
 * their temporary names: those of processes no longer running. Another's under way is left alone.
 */
function removeAbandoned (destination: string): void {
  const prefix = `.${basename(destination)}.partial-`
  let names: string[]
  try {
    names = readdirSync(dirname(resolve(destination)))
  } catch {
    return // no directory: said when the partial copy cannot be made
  }
  for (const found of names) {
    const pid = found.startsWith(prefix) ? /^(\d+)(-journal)?$/.exec(found.slice(prefix.length))?.[1] : undefined
    if (pid !== undefined && !running(Number(pid))) rmSync(join(dirname(destination), found), { force: true })
  }
}

/** True when a process `pid` runs (or exists, and is another user's). */
function running (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/** Removes what a backup to `destination` left under its temporary name (the copy and its journal), if anything. */
export function removePartial (destination: string): void {
  const partial = partialOf(destination)
  for (const path of [partial, `${partial}-journal`]) rmSync(path, { force: true })
}
