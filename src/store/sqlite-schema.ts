import { statSync } from 'node:fs'
import type Database from 'better-sqlite3'
import { openDatabase } from './sqlite-driver.js'
import { isBusy } from './sqlite-errors.js'
import { migrationsOf, newestVersion, tooNew } from './migrations.js'
import { resolve } from 'node:path'
import { ending } from '../config.js'

/** The schema version a database holds (0 for a new file). */
function versionOf (db: Database.Database): number {
  const table = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").get()
  if (table === undefined) return 0
  const row = db.prepare('SELECT max(version) AS version FROM schema_version').safeIntegers(false).get() as { version: number | null }
  return row.version ?? 0
}

/** The name plantstore records for its first migration: what tells its schema_version from another tool's. */
const FIRST_MIGRATION = migrationsOf('sqlite')[0].name

/**
 * What a database holds: plantstore's schema, at its version (0 for none yet: no tables or views,
 * or a making begun, as migrate creates schema_version alone first and another process may be
 * making the store right now), or another program's. Other tools keep a schema_version table too,
 * some with the same columns: plantstore's names its first migration as plantstore does, and its
 * first tables come with that row, in one transaction. One read transaction, one snapshot: read
 * statement by statement, a file another process was making the store in could show no
 * schema_version first and then that process's tables, which looks like another program's.
 */
function schemaOf (db: Database.Database): number | 'other' {
  return db.transaction(() => {
    const objects = db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'").pluck().all() as string[]
    if (objects.length === 0) return 0
    const columns = db.prepare('SELECT name FROM pragma_table_info(\'schema_version\')').pluck().all() as string[]
    if (!['version', 'name', 'applied_at'].every(column => columns.includes(column))) return 'other'
    const first = db.prepare('SELECT name FROM schema_version WHERE version = 1').pluck().get()
    if (first === undefined) return objects.length === 1 ? 0 : 'other' // schema_version alone: a making begun
    return first === FIRST_MIGRATION ? versionOf(db) : 'other'
  })()
}

/**
 * What the file at `path` holds (schemaOf), read without changing it; undefined where it is no
 * regular file (missing; the opening refuses the others: SQLite opening a FIFO would wait for a
 * writer), and the error where SQLite cannot read it (not a database, locked past the wait, no
 * permission, a WAL store on read-only media without its -shm file).
 */
function schemaAt (path: string): number | 'other' | Error | undefined {
  if (!isFile(path)) return undefined
  let db: Database.Database
  try {
    db = openDatabase(path, { readonly: true, fileMustExist: true })
  } catch (error) {
    return error as Error
  }
  try {
    return schemaOf(db)
  } catch (error) {
    return error as Error
  } finally {
    db.close()
  }
}

/**
 * The plant store in the file at `path`, in one read that changes nothing: its schema version (0:
 * no store, or no such file), or, where SQLite cannot read the file, the line that says so.
 */
export function storeAt (path: string): number | { unreadable: string } {
  const schema = schemaAt(path)
  if (schema instanceof Error) return { unreadable: `Cannot read the database at ${resolve(path)}: ${ending(schema.message)}` }
  return typeof schema === 'number' ? schema : 0
}

/**
 * Throws where plantstore must not make or open a store in the file at `path`, before anything of
 * it changes (its mode included): another program's database (a store is made only in a file of
 * its own), a newer plantstore's store, or a file SQLite cannot read as a database. Anything else
 * goes on to the opening: a missing or empty file is a new store; a locked or unreadable one, the
 * opening says why.
 */
export function refuseForeignFile (path: string): void {
  const schema = schemaAt(path)
  if (schema === 'other') throw new Error('it holds another program\'s database (tables, but not plantstore\'s schema); give plantstore a file of its own')
  const newest = newestVersion('sqlite')
  if (typeof schema === 'number' && schema > newest) throw tooNew(schema, newest)
  if (schema instanceof Error && (schema as { code?: string }).code === 'SQLITE_NOTADB') throw schema
}

function isFile (path: string): boolean {
  try {
    return statSync(path).isFile()
  } catch {
    return false
  }
}

/**
 * Runs `step`, again while another process holds a lock it needs, for up to `ms`. Switching a new
 * file to WAL can fail at once with SQLITE_BUSY when several processes open it together: SQLite
 * does not wait in its busy handler there. Start-up only, so a blocking pause is fine.
 */
function whileBusy<T> (step: () => T, ms = 5000): T {
  const until = Date.now() + ms
  for (;;) {
    try {
      return step()
    } catch (error) {
      if (!isBusy(error) || Date.now() > until) throw error
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 20)
    }
  }
}

/**
 * Pragmas every connection sets; `synchronous = FULL` makes each commit fsync the WAL, and the
 * store's write connection passes NORMAL because the store fsyncs the WAL itself. The page
 * cache is 2 MiB a connection, not the 16 MiB better-sqlite3 builds in: the service holds two
 * connections, both caches filled up under load (a large share of the process's memory), and the
 * kernel's page cache keeps the file's pages anyway. `busyTimeoutMs` is how long a statement
 * waits for a lock another connection holds; the service's own connections pass 0 and bound
 * their waits themselves.
 */
export function configure (db: Database.Database, { busyTimeoutMs = 5000, synchronous = 'FULL' }: { busyTimeoutMs?: number, synchronous?: 'FULL' | 'NORMAL' } = {}): void {
  db.pragma(`busy_timeout = ${busyTimeoutMs}`)
  db.pragma(`synchronous = ${synchronous}`)
  db.pragma('cache_size = -2048')
  db.pragma('foreign_keys = ON')
  db.defaultSafeIntegers(true)
}

/**
 * Creates or upgrades the schema at `path`, each migration in its own transaction. Safe when
 * several processes start at once: BEGIN IMMEDIATE lets one migrate while the others wait.
 * Refuses a database from a newer plantstore.
 */
export function migrate (path: string): void {
  const db = openDatabase(path)
  try {
    configure(db)
    const known = migrationsOf('sqlite')
    const newest = newestVersion('sqlite')
    // Most starts find the schema current: they read its version and take no write lock, so an
    // operator's open transaction does not hold up a start. A newer store is refused before
    // anything of it changes (its journal mode included).
    const found = whileBusy(() => versionOf(db))
    if (found > newest) throw tooNew(found, newest)
    if (db.pragma('journal_mode', { simple: true }) !== 'wal') whileBusy(() => db.pragma('journal_mode = WAL'))
    if (found === newest) return
    db.exec('CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)')
    for (const migration of known) {
      db.exec('BEGIN IMMEDIATE')
      try {
        const current = versionOf(db)
        if (current > newest) throw tooNew(current, newest)
        if (migration.version > current) {
          db.exec(migration.sql)
          db.prepare('INSERT INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)').run(migration.version, migration.name, Date.now())
        }
        db.exec('COMMIT')
      } catch (error) {
        db.exec('ROLLBACK')
        throw error
      }
    }
  } finally {
    db.close()
  }
}

/**
 * Copies every page of the WAL into the database file, so that the `.db` file alone holds all the
 * data (what a plain file copy takes), then empties the WAL if no one reads it. Readers of other
 * processes on an older snapshot (an export, a backup) keep the pages written after it in the WAL:
 * it waits `busyTimeoutMs` at most for them to end (not for readers that are up to date, which only
 * keep the WAL from being emptied). True when the database file holds every commit.
 */
export function checkpoint (db: Database.Database, busyTimeoutMs: number): boolean {
  type Outcome = Array<{ busy: number | bigint, log: number | bigint, checkpointed: number | bigint }>
  db.pragma(`busy_timeout = ${busyTimeoutMs}`)
  const [{ busy, log, checkpointed }] = db.pragma('wal_checkpoint(FULL)') as Outcome
  db.pragma('busy_timeout = 0')
  db.pragma('wal_checkpoint(TRUNCATE)')
  // Busy also when it copied every frame without the writer's lock (another process writing): the frames tell.
  return Number(log) === -1 ? Number(busy) === 0 : Number(log) === Number(checkpointed)
}
