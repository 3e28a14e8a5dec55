import Database from 'better-sqlite3'
import { extname } from 'node:path'
import { Worker } from 'node:worker_threads'
import { StoreUnavailableError } from '../errors.js'
import { makePrivate } from './sqlite-files.js'
import { checkpoint, configure, migrate } from './sqlite-schema.js'
import { PLANT_BY_ID_SQL, PLANT_COLUMNS, rowToPlant, rowToToken, type PlantRow, type TokenRow } from './sqlite-rows.js'
import type { Outcome, Ready, WriteBatch, WriteRequest, WriteResult, WriterData } from './sqlite-writer.js'
import type { NewToken, Plant, PlantRecord, Store, TokenRecord } from './store.js'

const WRITER = new URL(`./sqlite-writer${extname(import.meta.url)}`, import.meta.url)

/** Built, the writer is plain JS; from source (tests under tsx), the thread must load tsx itself. */
function startWriter (workerData: WriterData): Worker {
  if (WRITER.pathname.endsWith('.js')) return new Worker(WRITER, { workerData })
  const bootstrap = `import('tsx/esm/api').then(tsx => { tsx.register(); return import(${JSON.stringify(WRITER.href)}) })`
  return new Worker(bootstrap, { eval: true, workerData })
}

/** How much the store takes on at once; past it, it refuses at once (503) rather than queue without end. */
export interface StoreLimits {
  /** Writes asked for and not yet answered by the writer thread. */
  writesInFlight: number
  /** Reads waiting for the end of the current turn of the event loop. */
  readsPending: number
  /** How long a write may wait (for the write lock, behind other writes) before it is refused unstored, in ms. */
  writeTimeoutMs: number
}

/** Far above what group commit gathers under load; a write's deadline of about 2 s, as SPEC section 8 says. */
export const DEFAULT_LIMITS: StoreLimits = { writesInFlight: 1024, readsPending: 1024, writeTimeoutMs: 2000 }

/** How often the main thread looks for writes the writer thread left unanswered past their deadline, in ms. */
const SWEEP_MS = 250
/** After a writer thread that failed to start, the next start waits this long (ms), doubling up to `max`. */
const RESTART_BACKOFF_MS = { first: 100, max: 5000 }

/** A read's failure as the caller sees it: storage trouble, answered 503. */
function unavailable (error: unknown): StoreUnavailableError {
  return new StoreUnavailableError((error as Error).message)
}

/** A caller waiting for the store: the settling functions of its promise. */
interface Waiter { resolve: (value: unknown) => void, reject: (error: Error) => void }

/** A caller waiting for a write, and the time (Date.now()) by which the writer must have answered. */
interface WriteWaiter extends Waiter { deadline: number }

/** The page queries: keyset pagination on the id (the rowid) or the (tag, id) index, never OFFSET. */
export const LIST_SQL = {
  first: `SELECT ${PLANT_COLUMNS} FROM plants ORDER BY id LIMIT ?`,
  after: `SELECT ${PLANT_COLUMNS} FROM plants WHERE id > ? ORDER BY id LIMIT ?`,
  tagFirst: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? ORDER BY id LIMIT ?`,
  tagAfter: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? AND id > ? ORDER BY id LIMIT ?`
}

/**
 * The embedded store: one SQLite file in WAL mode. Reads run on this thread (a point query
 * takes microseconds), in batches; writes go to a writer thread that fsyncs before answering.
 * Both are bounded (`StoreLimits`): a write waits until its deadline at most, and past a cap
 * the store throws StoreUnavailableError at once.
 */
export class SqliteStore implements Store {
  private readonly db: Database.Database
  private readonly sql
  private readonly limits: StoreLimits
  private worker?: Worker
  private readonly waiting = new Map<number, WriteWaiter>()
  private seq = 0
  /**
   * Writer answers (one commit, one fsync each, unless the write lock was taken) and the writes
   * they carried: writes / transactions is the group-commit factor. Reads and their batches (one
   * snapshot each), likewise. Writer threads started, failed starts included.
   */
  readonly stats = { transactions: 0, writes: 0, readBatches: 0, reads: 0, writerStarts: 0 }
  private outbox: WriteRequest[] = []
  /** When the writes in the outbox must be answered: they were all asked for in this turn. */
  private outboxDeadline = 0
  /** Writes posted to the writer thread that it has not answered yet (answered late ones included). */
  private inWriter = 0
  /** Writer threads in a row that failed to start; none is started before `restartAt`. */
  private failedStarts = 0
  private restartAt = 0
  private writerStopped = ''
  private readonly sweeper: NodeJS.Timeout
  private pendingReads: Array<Waiter & { query: () => unknown }> = []
  private closed = false

  /** Opens (creating and migrating if needed) the database file at `path`. */
  constructor (private readonly path: string, limits: Partial<StoreLimits> = {}) {
    this.limits = { ...DEFAULT_LIMITS, ...limits }
    makePrivate(path)
    migrate(path)
    this.db = new Database(path, { readonly: true })
    // Reads run on the event loop: they must never sleep waiting for a lock. A read that finds
    // the database locked (rare in WAL mode) is answered 503 at once.
    configure(this.db, { busyTimeoutMs: 0 })
    this.sweeper = setInterval(() => this.expireWrites(), SWEEP_MS).unref()
    this.sql = {
      getPlant: this.db.prepare(PLANT_BY_ID_SQL).raw(),
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

  /**
   * The writer thread, started on the first write. A writer that stops is replaced on the next
   * write; one that fails to start (the file cannot be opened) is retried after a back-off, and
   * until then there is none (undefined): writes are refused at once.
   */
  private writer (): Worker | undefined {
    if (this.worker !== undefined) return this.worker
    if (Date.now() < this.restartAt) return undefined
    const worker = startWriter({ path: this.path, writeTimeoutMs: this.limits.writeTimeoutMs })
    this.stats.writerStarts++
    let ready = false
    worker.on('message', (message: WriteResult[] | Ready) => {
      if (message === 'ready') {
        ready = true
        this.failedStarts = 0
        return
      }
      this.inWriter -= message.length
      this.stats.transactions++
      this.stats.writes += message.length
      for (const [seq, outcome, valueOrMessage] of message) this.settle(seq, outcome, valueOrMessage)
    })
    const lost = (reason: string): void => {
      if (this.worker !== worker) return
      this.worker = undefined
      this.inWriter = 0
      if (ready) {
        this.restartAt = 0 // it worked: the next write starts a fresh one
      } else {
        this.restartAt = Date.now() + Math.min(RESTART_BACKOFF_MS.first * 2 ** this.failedStarts, RESTART_BACKOFF_MS.max)
        this.failedStarts++
      }
      this.writerStopped = `The SQLite writer stopped: ${reason}`
      const error = new StoreUnavailableError(this.writerStopped)
      for (const waiter of this.waiting.values()) waiter.reject(error)
      this.waiting.clear()
      this.outbox = [] // their callers were just answered; they must not run in the next writer
    }
    worker.on('error', error => lost(error instanceof Error ? error.message : String(error)))
    worker.on('exit', code => lost(`its thread exited with code ${code}`))
    this.worker = worker
    return worker
  }

  /**
   * The backstop for a writer that cannot answer in time (a stalled disk, a hung fsync): a write
   * still unanswered a sweep after its deadline is answered 503 here. Unlike the writer's own
   * refusals, such a write may still commit later; a retry of it then answers 'same'.
   */
  private expireWrites (): void {
    const late = Date.now() - SWEEP_MS
    // Deadlines grow with the sequence number, and the map keeps insertion order.
    for (const [seq, waiter] of this.waiting) {
      if (waiter.deadline > late) return
      this.waiting.delete(seq)
      waiter.reject(new StoreUnavailableError('The SQLite writer did not answer by the write\'s deadline; the write may still be committed.'))
    }
  }

  private settle (seq: number, outcome: Outcome, valueOrMessage: unknown): void {
    const waiter = this.waiting.get(seq)
    this.waiting.delete(seq)
    if (outcome === 'done') waiter?.resolve(valueOrMessage)
    else waiter?.reject(outcome === 'unavailable' ? new StoreUnavailableError(valueOrMessage as string) : new Error(valueOrMessage as string))
  }

  private write<T> (op: WriteRequest[1], ...args: unknown[]): Promise<T> {
    if (this.inWriter + this.outbox.length >= this.limits.writesInFlight) {
      return Promise.reject(new StoreUnavailableError(`${this.limits.writesInFlight} writes are in flight, as many as the store takes on.`))
    }
    if (this.worker === undefined && Date.now() < this.restartAt) return Promise.reject(new StoreUnavailableError(this.writerStopped))
    const seq = ++this.seq
    // Writes made in one turn of the event loop travel as one message: fewer messages to
    // clone and wake up for, and the writer sees them together, so they share a commit (and a
    // deadline: one clock reading per turn).
    if (this.outbox.length === 0) {
      this.outboxDeadline = Date.now() + this.limits.writeTimeoutMs
      setImmediate(() => this.send())
    }
    const deadline = this.outboxDeadline
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(seq, { resolve: resolve as (value: unknown) => void, reject, deadline })
      this.outbox.push([seq, op, args])
    })
  }

  private send (): void {
    const requests = this.outbox
    this.outbox = []
    if (requests.length === 0) return
    const worker = this.closed ? undefined : this.writer()
    if (worker === undefined) {
      for (const [seq] of requests) this.settle(seq, 'unavailable', this.closed ? 'The store is closed.' : this.writerStopped)
      return
    }
    this.inWriter += requests.length
    worker.postMessage([this.outboxDeadline, requests] satisfies WriteBatch)
  }

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
      return Promise.reject(new StoreUnavailableError(`${this.limits.readsPending} reads are waiting, as many as the store takes on.`))
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
    try {
      for (const { query, resolve, reject } of batch) {
        try {
          resolve(query())
        } catch (error) {
          reject(unavailable(error))
        }
      }
    } finally {
      if (this.db.inTransaction) this.endReads()
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

  create (plant: PlantRecord): Promise<'created' | 'same' | 'conflict'> {
    return this.write('create', plant.id, plant.name, plant.tag ?? null)
  }

  get (id: bigint): Promise<PlantRecord | undefined> {
    return this.read(() => {
      const row = this.sql.getPlant.get(id) as PlantRow | undefined
      return row === undefined ? undefined : rowToPlant(row)
    })
  }

  list ({ limit, after, tag }: { limit: number, after?: bigint, tag?: string }): Promise<PlantRecord[]> {
    return this.read(() => {
      const rows = tag === undefined
        ? (after === undefined ? this.sql.listFirst.all(limit) : this.sql.listAfter.all(after, limit))
        : (after === undefined ? this.sql.listTagFirst.all(tag, limit) : this.sql.listTagAfter.all(tag, after, limit))
      return (rows as PlantRow[]).map(rowToPlant)
    })
  }

  replace (id: bigint, plant: Plant): Promise<PlantRecord | undefined> {
    return this.write('replace', id, plant.name, plant.tag ?? null)
  }

  remove (id: bigint): Promise<boolean> {
    return this.write('remove', id)
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
   * Answers what is waiting, then leaves a self-contained `.db` file: the reader closes first, so
   * the writer's connection is the last one; it empties the WAL into the database file on close.
   */
  async close (): Promise<void> {
    this.runReads() // reads and writes still waiting for the end of this turn go first
    this.send()
    this.closed = true
    clearInterval(this.sweeper)
    this.db.close()
    const worker = this.worker
    this.worker = undefined
    if (worker !== undefined) {
      const exited = new Promise(resolve => worker.once('exit', resolve))
      worker.postMessage('close')
      await exited
    } else if (this.stats.writerStarts > 0) {
      this.checkpointAlone() // this store wrote, but its writer is gone
    }
  }

  /** Empties the WAL through a connection of its own, if the file can be opened at all. */
  private checkpointAlone (): void {
    try {
      const db = new Database(this.path)
      try {
        checkpoint(db, this.limits.writeTimeoutMs)
      } finally {
        db.close()
      }
    } catch {
      // the file is lost or locked: the WAL stays beside it, and is not lost either
    }
  }
}
