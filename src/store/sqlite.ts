import type Database from 'better-sqlite3'
import { closeSync, fstatSync, fsyncSync, openSync } from 'node:fs'
import { dirname } from 'node:path'
import { StoreUnavailableError } from '../errors.js'
import { Checkpoints } from './sqlite-checkpoints.js'
import { describe } from './describe.js'
import { openDatabase } from './sqlite-driver.js'
import { makePrivate } from './sqlite-files.js'
import { LOCK_POLL_MS, WritePipeline } from './sqlite-pipeline.js'
import { ReadBatches } from './sqlite-reads.js'
import { BOUNDS_SQL, CHANGES_SQL, LIST_SQL, VERSIONED_PLANT_SQL, rowToChange, rowToPlant, rowToToken, type ChangeRow, type PlantRow, type TokenRow } from './sqlite-rows.js'
import { checkpoint, configure, migrate, refuseForeignFile } from './sqlite-schema.js'
import { exportSqlite, importSqlite } from './sqlite-transfer.js'
import { WalSync } from './sqlite-wal.js'
import { sqliteWebhooks, webhookReads } from './sqlite-webhooks.js'
import { openWriter, type Operation, type Writer } from './sqlite-writes.js'
import { pageOf, readFrom, scanEnd, type ChangesPage, type Conditions, type Created, type ImportOutcome, type LogBounds, type NewToken, type Plant, type PlantRecord, type Store, type TokenRecord, type VersionedPlant } from './store.js'
import type { WebhookStore } from './webhooks.js'

/** How much the store takes on at once; past it, it refuses at once (503) rather than queue without end. */
export interface StoreLimits {
  /** Writes asked for and not yet made durable: waiting for their turn, for the lock, or for their fdatasync. */
  writesInFlight: number
  /** Reads waiting for the end of the current turn of the event loop. */
  readsPending: number
  /** How long a write may wait (for the write lock, behind other writes) before it is refused unstored, in ms. */
  writeTimeoutMs: number
}

/** Far above what group commit gathers under load; a write's deadline of about 2 s, as SPEC section 8 says. */
export const DEFAULT_LIMITS: StoreLimits = { writesInFlight: 1024, readsPending: 1024, writeTimeoutMs: 2000 }

/**
 * Tells whether a file held open at `fd` has been removed (its directory deleted, or another
 * file renamed over it): then the writes the store acknowledges go to a file no one can open again.
 */
function removedFiles (files: Array<[path: string, fd: number]>): () => string | undefined {
  return () => {
    for (const [path, fd] of files) {
      try {
        if (fstatSync(fd).nlink === 0) return `${path} was removed while the service ran`
      } catch (error) {
        return `${path} cannot be examined (${describe(error)})`
      }
    }
    return undefined
  }
}

/**
 * The embedded store: one SQLite file in WAL mode. Reads run on this thread in batches, one per
 * turn of the event loop. Writes too: the writes of one turn are one transaction (a few
 * microseconds each) whose COMMIT writes the WAL without syncing it; the store then fdatasyncs
 * the WAL on libuv's thread pool and answers the turn's callers when that sync, begun after
 * their commit, returns. The next turn may commit while a sync runs (its writes wait for the
 * next one). Checkpoints run on a thread of their own. Both reads and writes are bounded
 * (`StoreLimits`): a write waits until its deadline at most, and past a cap the store throws
 * StoreUnavailableError at once. docs/durability.md argues why an answer is durable.
 * Each job has its module: ReadBatches (sqlite-reads.ts), WritePipeline (sqlite-pipeline.ts),
 * WalSync (sqlite-wal.ts), Checkpoints (sqlite-checkpoints.ts); this class opens the files and
 * the connections, holds the statements of the reads, and closes it all in order.
 */
export class SqliteStore implements Store {
  private readonly db: Database.Database
  private readonly sql
  private readonly limits: StoreLimits
  private readonly writer: Writer
  /** An fd of the -wal file, opened once SQLite's write connection holds it open: the same inode. */
  private readonly walFd: number
  /** An fd of the database file, held to tell whether the file is still there (its link count). */
  private readonly dbFd: number
  /**
   * Commits (one per transaction) and the writes they carried: writes / transactions is the
   * group-commit factor; fdatasyncs of the WAL; checkpoints started. Reads and their batches
   * (one snapshot each), likewise.
   */
  readonly stats = { transactions: 0, writes: 0, syncs: 0, checkpoints: 0, readBatches: 0, reads: 0 }
  onCommit?: (writes: number) => void
  /** The fdatasyncs that make commits durable before they are answered (a test may replace its `syncWal`). */
  readonly wal: WalSync
  private readonly pipeline: WritePipeline
  private readonly reads: ReadBatches
  private readonly checkpoints: Checkpoints
  private closed = false
  readonly webhooks: WebhookStore

  /** Opens (creating and migrating if needed) the database file at `path`. */
  constructor (private readonly path: string, limits: Partial<StoreLimits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits }
    refuseForeignFile(path)
    makePrivate(path)
    migrate(path)
    this.writer = openWriter(path)
    // The write connection opened (creating it if needed) the -wal file while it prepared its
    // statements, and holds it open; while it does, SQLite neither deletes nor replaces that file.
    const opened: number[] = []
    try {
      this.walFd = openSync(`${path}-wal`, 'r+')
      opened.push(this.walFd)
      this.dbFd = openSync(path, 'r') // held to tell whether the file is still there (removedFiles)
      opened.push(this.dbFd)
      // The WAL's name in its directory must survive a power loss too; SQLite syncs it when it
      // first syncs the WAL, which this connection never does itself.
      const dir = openSync(dirname(path), 'r')
      try {
        fsyncSync(dir)
      } finally {
        closeSync(dir)
      }
    } catch (error) {
      // The connection first: closing any fd of the file drops the POSIX locks SQLite holds on it.
      this.writer.db.close()
      for (const fd of opened) closeSync(fd)
      throw error
    }
    this.db = openDatabase(path, { readonly: true })
    // Preparing its statements reads the schema, which may wait while another process opens or
    // closes the file (as openWriter's may); the busy timeout goes once they are ready.
    configure(this.db)
    this.checkpoints = new Checkpoints(path, this.writer.walFrames, this.stats)
    // Once the store is closing, no checkpoint starts: the write connection's own, last, empties the WAL.
    this.wal = new WalSync(this.walFd, this.stats, () => { if (!this.closed) this.checkpoints.maybe() },
      removedFiles([[path, this.dbFd], [`${path}-wal`, this.walFd]]))
    this.pipeline = new WritePipeline(this.writer, this.wal, this.limits, this.stats, (writes) => this.onCommit?.(writes))
    this.reads = new ReadBatches(this.db, this.wal, this.limits, this.stats)
    this.sql = {
      getPlant: this.db.prepare(VERSIONED_PLANT_SQL).raw(),
      head: this.db.prepare('SELECT head FROM change_log').pluck(),
      bounds: this.db.prepare(BOUNDS_SQL),
      changes: this.db.prepare(CHANGES_SQL).raw(),
      listFirst: this.db.prepare(LIST_SQL.first).raw(),
      listAfter: this.db.prepare(LIST_SQL.after).raw(),
      listTagFirst: this.db.prepare(LIST_SQL.tagFirst).raw(),
      listTagAfter: this.db.prepare(LIST_SQL.tagAfter).raw(),
      findToken: this.db.prepare('SELECT * FROM tokens WHERE digest = ?').safeIntegers(false),
      listTokens: this.db.prepare('SELECT * FROM tokens ORDER BY id').safeIntegers(false),
      ping: this.db.prepare('SELECT 1')
    }
    const webhookQueries = webhookReads(this.db)
    // Reads run on the event loop: they must never sleep waiting for a lock. A read that finds
    // the database locked (rare in WAL mode) is answered 503 at once.
    this.db.pragma('busy_timeout = 0')
    this.webhooks = sqliteWebhooks((op, ...args) => this.write(op, ...args), query => this.read(() => query(webhookQueries)))
  }

  private write<T> (op: Operation, ...args: unknown[]): Promise<T> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('The store is closed.'))
    return this.pipeline.write(op, args)
  }

  private read<T> (query: () => T): Promise<T> {
    return this.reads.read(query)
  }

  create (plant: PlantRecord): Promise<Created> {
    return this.write('create', plant.id, plant.name, plant.tag ?? null)
  }

  get (id: bigint): Promise<VersionedPlant | undefined> {
    return this.read(() => {
      const row = this.sql.getPlant.get(id) as [...PlantRow, bigint] | undefined
      return row === undefined ? undefined : { plant: rowToPlant([row[0], row[1], row[2]]), version: row[3] }
    })
  }

  list ({ limit, after, tag }: { limit: number, after?: bigint, tag?: string }): Promise<{ plants: PlantRecord[], position: bigint }> {
    return this.read(() => {
      const rows = tag === undefined
        ? (after === undefined ? this.sql.listFirst.all(limit) : this.sql.listAfter.all(after, limit))
        : (after === undefined ? this.sql.listTagFirst.all(tag, limit) : this.sql.listTagAfter.all(tag, after, limit))
      // The head from the same read transaction: the page shows exactly the changes up to it.
      return { plants: (rows as PlantRow[]).map(rowToPlant), position: this.sql.head.get() as bigint }
    })
  }

  replace (id: bigint, plant: Plant, conditions?: Conditions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'> {
    return this.write('replace', id, plant.name, plant.tag ?? null, conditions)
  }

  remove (id: bigint, conditions?: Conditions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'> {
    return this.write('remove', id, conditions)
  }

  changes ({ after, limit, tag }: { after?: bigint, limit: number, tag?: string }): Promise<ChangesPage> {
    return this.read(() => {
      const bounds = this.sql.bounds.get() as LogBounds
      const from = readFrom(after, bounds)
      if (from === 'gone') return from
      const end = scanEnd(from, bounds.head)
      return pageOf((this.sql.changes.all({ after: from, end, tag: tag ?? null, limit }) as ChangeRow[]).map(rowToChange), limit, from, end)
    })
  }

  logBounds (): Promise<LogBounds> {
    return this.read(() => this.sql.bounds.get() as LogBounds)
  }

  pruneChanges (before: Date, batch: number): Promise<number> {
    return this.write('pruneChanges', before.getTime(), batch)
  }

  exportPlants (): AsyncIterable<PlantRecord[]> {
    return exportSqlite(this.path)
  }

  importPlants (source: AsyncIterable<PlantRecord[]>, options: { replace: boolean }): Promise<ImportOutcome> {
    return importSqlite(this.path, source, options)
  }

  createToken (token: NewToken): Promise<TokenRecord | 'name-taken'> {
    return this.write('createToken', token)
  }

  createFirstToken (token: NewToken): Promise<TokenRecord | undefined> {
    return this.write('createFirstToken', token)
  }

  findToken (digest: Buffer): Promise<{ record: TokenRecord, digest: Buffer } | undefined> {
    return this.read(() => {
      const row = this.sql.findToken.get(digest) as (TokenRow & { digest: Buffer }) | undefined
      return row === undefined ? undefined : { record: rowToToken(row), digest: row.digest }
    })
  }

  listTokens (): Promise<TokenRecord[]> {
    return this.read(() => (this.sql.listTokens.all() as TokenRow[]).map(rowToToken))
  }

  revokeToken (nameOrId: string): Promise<TokenRecord | undefined> {
    return this.write('revokeToken', nameOrId)
  }

  async ping (): Promise<void> {
    await this.read(() => this.sql.ping.get())
    await this.write('ping')
  }

  /**
   * Answers what is waiting (writes waiting for the lock, until their deadlines or `withinMs`,
   * whichever comes first: then 503, unstored), then leaves a self-contained `.db` file: the
   * reader and the checkpointer close first, so the write connection is the last one; it empties
   * the WAL into the database file and removes it. Past `withinMs` it waits for no sync and no
   * lock: a WAL it could not empty (another process holds the lock, or reads an older snapshot)
   * stays beside the file, complete, for the next start; it resolves then with a sentence that says so.
   */
  close (withinMs = this.limits.writeTimeoutMs): Promise<string | undefined> {
    this.closing ??= this.closeOnce(Date.now() + withinMs)
    return this.closing
  }

  private closing?: Promise<string | undefined>

  private async closeOnce (by: number): Promise<string | undefined> {
    this.reads.run() // reads and writes still waiting for the end of this turn go first
    this.pipeline.flush()
    while (this.pipeline.waiting > 0) {
      if (Date.now() >= by) {
        this.pipeline.refuseWaiting()
        break
      }
      await new Promise(resolve => setTimeout(resolve, LOCK_POLL_MS))
      this.pipeline.flush()
    }
    this.closed = true
    const left = (): number => Math.max(0, Math.min(this.limits.writeTimeoutMs, by - Date.now()))
    await this.wal.drain(left())
    this.db.close()
    await this.checkpoints.close()
    let whole = false
    if (this.wal.suspect === undefined) {
      try {
        // As long as the stop allows: a reader in another process (an export) keeps the pages written after its snapshot in the WAL until it ends.
        whole = checkpoint(this.writer.db, Math.max(0, by - Date.now()))
      } catch {
        // an I/O error: the WAL stays, complete, for the next start
      }
    }
    this.writer.db.close()
    closeSync(this.walFd)
    closeSync(this.dbFd)
    return whole ? undefined : 'the last writes are in the WAL, not yet in the database file: another process was using the store (an export, a backup, an import), or a sync failed; keep the -wal file beside the .db if you copy it (the next start empties it)'
  }
}
