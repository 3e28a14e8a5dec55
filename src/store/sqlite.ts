import Database from 'better-sqlite3'
import { closeSync, fdatasync, fstatSync, fsyncSync, openSync } from 'node:fs'
import { dirname, extname } from 'node:path'
import { Worker } from 'node:worker_threads'
import { StoreUnavailableError } from '../errors.js'
import type { CheckpointerData, CheckpointResult } from './sqlite-checkpointer.js'
import { describe } from './describe.js'
import { isBusy, isUnavailable } from './sqlite-errors.js'
import { makePrivate } from './sqlite-files.js'
import { checkpoint, configure, migrate } from './sqlite-schema.js'
import { BOUNDS_SQL, CHANGES_SQL, LIST_SQL, VERSIONED_PLANT_SQL, rowToChange, rowToPlant, rowToToken, type ChangeRow, type PlantRow, type TokenRow } from './sqlite-rows.js'
import { exportSqlite, importSqlite } from './sqlite-transfer.js'
import { openWriter, WAL_CHECKPOINT_BYTES, type Operation, type WriteResult, type Writer } from './sqlite-writes.js'
import { pageOf, readFrom, scanEnd, type ChangesPage, type Created, type ImportOutcome, type LogBounds, type NewToken, type Plant, type PlantRecord, type Store, type TokenRecord, type Versions, type VersionedPlant } from './store.js'

const CHECKPOINTER = new URL(`./sqlite-checkpointer${extname(import.meta.url)}`, import.meta.url)

/** Built, the checkpointer is plain JS; from source (tests under tsx), the thread must load tsx itself. */
function startCheckpointer (workerData: CheckpointerData): Worker {
  if (CHECKPOINTER.pathname.endsWith('.js')) return new Worker(CHECKPOINTER, { workerData })
  const bootstrap = `import('tsx/esm/api').then(tsx => { tsx.register(); return import(${JSON.stringify(CHECKPOINTER.href)}) })`
  return new Worker(bootstrap, { eval: true, workerData })
}

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

/** How often the store looks for answers whose fdatasync has not come back past their deadline, in ms. */
const SWEEP_MS = 250
/** While another connection holds the write lock, how often the store tries BEGIN IMMEDIATE again, in ms. */
const LOCK_POLL_MS = 5
/** The least time between two checkpoints, in ms: a WAL that a reader pins is not checkpointed in a loop. */
const CHECKPOINT_INTERVAL_MS = 200
/** After the checkpointer thread failed, the next one starts no sooner than this, in ms. */
const CHECKPOINTER_BACKOFF_MS = 1000

/** A read's failure as the caller sees it: storage trouble, answered 503. */
function unavailable (error: unknown): StoreUnavailableError {
  return new StoreUnavailableError((error as Error).message)
}

/** A write's failure as the caller sees it: storage trouble is 503, anything else (a bug) stays an Error (500). */
function failureOf (error: unknown): Error {
  return isUnavailable(error) ? new StoreUnavailableError(describe(error)) : new Error(describe(error))
}

/** A caller waiting for the store: the settling functions of its promise. */
interface Waiter { resolve: (value: unknown) => void, reject: (error: Error) => void }

/** A write asked for and not yet committed, and the time (Date.now()) by which it must be answered. */
interface PendingWrite extends Waiter { op: Operation, args: unknown[], deadline: number }

/**
 * Answers waiting for the fdatasync that makes commit number `commit` durable: the writes of
 * that commit (with their results) and the reads that may have seen it. `answered` once the
 * backstop answered them 503; they still count against the cap until the fdatasync returns.
 */
interface AwaitingSync {
  commit: number
  deadline: number
  writes: number
  answers: Array<{ waiter: Waiter, result: WriteResult }>
  answered: boolean
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
 */
export class SqliteStore implements Store {
  private readonly db: Database.Database
  private readonly sql
  private readonly limits: StoreLimits
  private readonly writer: Writer
  /** An fd of the -wal file, opened once SQLite's write connection holds it open: the same inode. */
  private readonly walFd: number
  /** The fdatasync the store uses; a test may put a failing or hanging one in its place. */
  private syncWal: (fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => void = fdatasync
  /**
   * Commits (one per transaction) and the writes they carried: writes / transactions is the
   * group-commit factor; fdatasyncs of the WAL; checkpoints started. Reads and their batches
   * (one snapshot each), likewise.
   */
  readonly stats = { transactions: 0, writes: 0, syncs: 0, checkpoints: 0, readBatches: 0, reads: 0 }
  onCommit?: (writes: number) => void
  /** Writes asked for in this turn, and those still waiting for the write lock. */
  private outbox: PendingWrite[] = []
  private flushScheduled = false
  /** When the writes asked for in this turn must be answered: one clock reading per turn. */
  private turnDeadline = 0
  private lockRetry?: NodeJS.Timeout
  /** Why the last transaction could not begin: the lock error, repeated to the writes that then expire. */
  private lockError = 'database is locked'
  /** Commits made, and the last one an fdatasync covered. */
  private committed = 0
  private synced = 0
  private syncing = false
  private awaiting: AwaitingSync[] = []
  /** Writes committed but not yet covered by an fdatasync (answered or not): they count against the cap. */
  private unsynced = 0
  /** Set for good once an fdatasync of the WAL failed: no write is answered 200 after that. */
  private walSuspect?: string
  private checkpointer?: Worker
  private checkpointRunning = false
  private nextCheckpointAt = 0
  private readonly sweeper: NodeJS.Timeout
  private pendingReads: Array<Waiter & { query: () => unknown }> = []
  private closed = false

  /** Opens (creating and migrating if needed) the database file at `path`. */
  constructor (private readonly path: string, limits: Partial<StoreLimits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits }
    makePrivate(path)
    migrate(path)
    this.writer = openWriter(path)
    // The write connection opened (creating it if needed) the -wal file while it prepared its
    // statements, and holds it open; while it does, SQLite neither deletes nor replaces that file.
    try {
      this.walFd = openSync(`${path}-wal`, 'r+')
      // The WAL's name in its directory must survive a power loss too; SQLite syncs it when it
      // first syncs the WAL, which this connection never does itself.
      const dir = openSync(dirname(path), 'r')
      try {
        fsyncSync(dir)
      } finally {
        closeSync(dir)
      }
    } catch (error) {
      this.writer.db.close()
      throw error
    }
    this.db = new Database(path, { readonly: true })
    // Reads run on the event loop: they must never sleep waiting for a lock. A read that finds
    // the database locked (rare in WAL mode) is answered 503 at once.
    configure(this.db, { busyTimeoutMs: 0 })
    this.sweeper = setInterval(() => this.expireAnswers(), SWEEP_MS).unref()
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
      ping: this.db.prepare('SELECT 1'),
      begin: this.db.prepare('BEGIN'),
      end: this.db.prepare('COMMIT')
    }
  }

  private write<T> (op: Operation, ...args: unknown[]): Promise<T> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('The store is closed.'))
    if (this.walSuspect !== undefined) return Promise.reject(new StoreUnavailableError(this.walSuspect))
    if (this.outbox.length + this.unsynced >= this.limits.writesInFlight) {
      return Promise.reject(new StoreUnavailableError(`${this.limits.writesInFlight} writes are in flight, as many as the store takes on.`, 'capacity'))
    }
    // The writes of one turn run together at its end, as one transaction: one commit and one
    // fdatasync for all of them (and one clock reading for their deadline).
    if (!this.flushScheduled) {
      this.flushScheduled = true
      this.turnDeadline = Date.now() + this.limits.writeTimeoutMs
      setImmediate(() => this.flush())
    }
    const deadline = this.turnDeadline
    return new Promise<T>((resolve, reject) => {
      this.outbox.push({ op, args, deadline, resolve: resolve as (value: unknown) => void, reject })
    })
  }

  /**
   * Commits every write asked for since the last flush and still within its deadline; those past
   * it are answered 503 without running, so a write answered 503 here is not stored. When
   * another connection holds the write lock, nothing runs: the writes wait for a later turn or
   * a short timer, each until its own deadline, and the event loop never sleeps on the lock.
   */
  private flush (): void {
    this.flushScheduled = false
    if (this.lockRetry !== undefined) clearTimeout(this.lockRetry)
    this.lockRetry = undefined
    if (this.outbox.length === 0) return
    if (this.walSuspect !== undefined) {
      const refusal = new StoreUnavailableError(this.walSuspect)
      for (const write of this.outbox) write.reject(refusal)
      this.outbox = []
      return
    }
    const now = Date.now()
    const live: PendingWrite[] = []
    for (const write of this.outbox) {
      if (write.deadline > now) live.push(write)
      else write.reject(new StoreUnavailableError(`The write waited for the database past its deadline: ${this.lockError}`, 'deadline'))
    }
    this.outbox = []
    if (live.length === 0) return
    let results: WriteResult[]
    try {
      results = this.writer.run(live)
    } catch (error) {
      if (isBusy(error)) {
        this.lockError = describe(error)
        this.outbox = live // in order, so the first has the earliest deadline
        this.lockRetry = setTimeout(() => this.flush(), Math.max(1, Math.min(LOCK_POLL_MS, live[0].deadline - now)))
        return
      }
      const failure = failureOf(error)
      for (const write of live) write.reject(failure)
      return
    }
    this.stats.transactions++
    this.stats.writes += live.length
    this.onCommit?.(live.length)
    this.unsynced += live.length
    this.awaiting.push({
      commit: ++this.committed,
      deadline: live[0].deadline,
      writes: live.length,
      answers: live.map((waiter, i) => ({ waiter, result: results[i] })),
      answered: false
    })
    this.sync()
  }

  /**
   * Starts an fdatasync of the WAL unless one runs already; it covers every commit made before it
   * starts. When it returns, the answers waiting for those commits go out, and the commits made
   * meanwhile get the next one.
   */
  private sync (): void {
    if (this.syncing || this.synced === this.committed || this.walSuspect !== undefined) return
    const target = this.committed
    this.syncing = true
    this.stats.syncs++
    this.syncWal(this.walFd, (error) => {
      this.syncing = false
      if (error !== null) return this.syncFailed(error)
      this.synced = target
      while (this.awaiting.length > 0 && this.awaiting[0].commit <= target) {
        const batch = this.awaiting.shift()!
        this.unsynced -= batch.writes
        if (batch.answered) continue
        for (const { waiter, result } of batch.answers) {
          if (result[0]) waiter.resolve(result[1])
          else waiter.reject(failureOf(result[1]))
        }
      }
      if (this.closed && this.awaiting.length === 0) this.drained?.()
      this.sync()
      this.maybeCheckpoint()
    })
  }

  /**
   * An fdatasync of the WAL failed (EIO, ENOSPC…). The kernel may have dropped the pages it could
   * not write and will not report it again, so no later sync proves them on disk: every answer
   * waiting is 503, and from now on so is every write, until the service restarts and SQLite's
   * recovery checks the WAL frame by frame.
   */
  private syncFailed (error: NodeJS.ErrnoException): void {
    this.walSuspect = `The fdatasync of the WAL failed (${describe(error)}); writes are refused until the service restarts.`
    const refusal = new StoreUnavailableError(this.walSuspect)
    for (const batch of this.awaiting) {
      if (!batch.answered) for (const { waiter } of batch.answers) waiter.reject(refusal)
    }
    this.awaiting = []
    this.unsynced = 0
    this.drained?.()
  }

  /**
   * The backstop for an fdatasync that does not return in time (a stalled disk): answers still
   * waiting a sweep after their deadline are 503. Such a write is committed and may still become
   * durable; a retry of it then answers 'same'.
   */
  private expireAnswers (): void {
    const late = Date.now() - SWEEP_MS
    for (const batch of this.awaiting) {
      if (batch.deadline > late) continue
      if (batch.answered) continue
      batch.answered = true
      const refusal = new StoreUnavailableError('The write\'s fdatasync did not return by its deadline; the write may still be stored.', 'deadline')
      for (const { waiter } of batch.answers) waiter.reject(refusal)
    }
  }

  /**
   * Asks the checkpointer thread to copy the WAL into the database file once the WAL has grown
   * past its bound: one checkpoint at a time, and not in a loop when a reader pins the WAL.
   */
  private maybeCheckpoint (): void {
    if (this.checkpointRunning || this.closed || Date.now() < this.nextCheckpointAt) return
    if (fstatSync(this.walFd).size < WAL_CHECKPOINT_BYTES) return
    const worker = this.checkpointer ?? this.startCheckpointer()
    this.checkpointRunning = true
    this.nextCheckpointAt = Date.now() + CHECKPOINT_INTERVAL_MS
    this.stats.checkpoints++
    worker.postMessage('checkpoint')
  }

  private startCheckpointer (): Worker {
    const worker = startCheckpointer({ path: this.path })
    worker.unref()
    worker.on('message', (result: CheckpointResult) => {
      this.checkpointRunning = false
      if (!result[0]) this.nextCheckpointAt = Date.now() + CHECKPOINTER_BACKOFF_MS
    })
    const lost = (): void => {
      if (this.checkpointer !== worker) return
      this.checkpointer = undefined
      this.checkpointRunning = false
      this.nextCheckpointAt = Date.now() + CHECKPOINTER_BACKOFF_MS
    }
    worker.on('error', lost)
    worker.on('exit', lost)
    this.checkpointer = worker
    return worker
  }

  /** Called once the last answer waiting for an fdatasync went out, while the store closes. */
  private drained?: () => void

  /**
   * Reads asked for during one turn of the event loop run together at its end (setImmediate),
   * in one read transaction, and their callers resume together. Under load this serves far
   * more GET /plants/{id} per CPU second than a read per request (docs/performance.md): each
   * stage (parse, route, query, reply) then runs for many requests in a row, and the replies
   * reach the clients back to back. The snapshot is taken only after every request
   * in the batch was read off its socket, so each read sees every write that was acknowledged
   * before its request arrived, whichever process made it; the next batch takes a new one.
   */
  private read<T> (query: () => T): Promise<T> {
    if (this.pendingReads.length >= this.limits.readsPending) {
      return Promise.reject(new StoreUnavailableError(`${this.limits.readsPending} reads are waiting, as many as the store takes on.`, 'capacity'))
    }
    return new Promise<T>((resolve, reject) => {
      this.pendingReads.push({ query, resolve: resolve as (value: unknown) => void, reject })
      if (this.pendingReads.length === 1) setImmediate(() => this.runReads())
    })
  }

  private runReads (): void {
    const batch = this.pendingReads
    this.pendingReads = []
    if (batch.length === 0) return
    try {
      this.sql.begin.run()
    } catch (error) {
      for (const { reject } of batch) reject(unavailable(error))
      return
    }
    this.stats.readBatches++
    this.stats.reads += batch.length
    // The snapshot may hold commits whose fdatasync has not returned: then the answers wait for
    // it, as the writes' own answers do, so no answer shows a change before it is durable. Once
    // an fdatasync failed, no sync will come: reads answer what SQLite holds.
    const answers: Array<{ waiter: Waiter, result: WriteResult }> | undefined =
      this.synced === this.committed || this.walSuspect !== undefined ? undefined : []
    try {
      for (const { query, resolve, reject } of batch) {
        let result: WriteResult
        try {
          result = [true, query()]
        } catch (error) {
          result = [false, unavailable(error)]
        }
        if (answers !== undefined) answers.push({ waiter: { resolve, reject }, result })
        else if (result[0]) resolve(result[1])
        else reject(result[1] as Error)
      }
    } finally {
      if (this.db.inTransaction) this.endReads()
    }
    if (answers !== undefined) {
      this.awaiting.push({ commit: this.committed, deadline: Date.now() + this.limits.writeTimeoutMs, writes: 0, answers, answered: false })
      this.sync()
    }
  }

  /** Ends a batch's snapshot. Ending a read hardly fails; if it does, a rollback ends it as well, so the next batch can begin. */
  private endReads (): void {
    try {
      this.sql.end.run()
    } catch {
      this.db.exec('ROLLBACK')
    }
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

  replace (id: bigint, plant: Plant, ifMatch?: Versions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'> {
    return this.write('replace', id, plant.name, plant.tag ?? null, ifMatch)
  }

  remove (id: bigint, ifMatch?: Versions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'> {
    return this.write('remove', id, ifMatch)
  }

  changes ({ after, limit, tag }: { after?: bigint, limit: number, tag?: string }): Promise<ChangesPage> {
    return this.read(() => {
      const bounds = this.sql.bounds.get() as LogBounds
      const from = readFrom(after, bounds)
      if (from === 'gone') return from
      const end = scanEnd(from, bounds.head)
      return pageOf((this.sql.changes.all({ after: from, end, tag: tag ?? null, limit }) as ChangeRow[]).map(rowToChange), limit, end)
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
   * Answers what is waiting (writes waiting for the lock, until their deadlines), then leaves a
   * self-contained `.db` file: the reader and the checkpointer close first, so the write
   * connection is the last one; it empties the WAL into the database file and removes it.
   */
  close (): Promise<void> {
    this.closing ??= this.closeOnce()
    return this.closing
  }

  private closing?: Promise<void>

  private async closeOnce (): Promise<void> {
    this.runReads() // reads and writes still waiting for the end of this turn go first
    this.flush()
    while (this.outbox.length > 0) {
      await new Promise(resolve => setTimeout(resolve, LOCK_POLL_MS))
      this.flush()
    }
    this.closed = true
    clearInterval(this.sweeper)
    if (this.awaiting.length > 0) {
      // A hung fdatasync must not hold the stop forever: its answers were sent by the backstop.
      const drained = new Promise<void>(resolve => { this.drained = resolve })
      const sweep = setInterval(() => this.expireAnswers(), SWEEP_MS)
      await Promise.race([drained, new Promise(resolve => setTimeout(resolve, this.limits.writeTimeoutMs + SWEEP_MS))])
      clearInterval(sweep)
      this.expireAnswers()
    }
    this.db.close()
    const worker = this.checkpointer
    this.checkpointer = undefined
    if (worker !== undefined) {
      const exited = new Promise(resolve => worker.once('exit', resolve))
      worker.ref() // the wait for it must keep the process alive
      worker.postMessage('close')
      await exited
    }
    if (this.walSuspect === undefined) {
      try {
        checkpoint(this.writer.db, this.limits.writeTimeoutMs)
      } catch {
        // another process is checkpointing or writing: the WAL stays, and is not lost
      }
    }
    this.writer.db.close()
    closeSync(this.walFd)
  }
}
