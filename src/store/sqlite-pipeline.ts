// The SQLite store's write pipeline: the writes asked for during one turn of the event loop are
// one transaction on the write connection (group commit), whose answers WalSync sends once an
// fdatasync has made the commit durable.
import { StoreUnavailableError } from '../errors.js'
import { describe } from './describe.js'
import { isBusy } from './sqlite-errors.js'
import { failureOf, type WalSync, type Waiter } from './sqlite-wal.js'
import type { Operation, WriteResult, Writer } from './sqlite-writes.js'

/** While another connection holds the write lock, how often the pipeline tries BEGIN IMMEDIATE again, in ms. */
export const LOCK_POLL_MS = 5

/** A write asked for and not yet committed, and the time (Date.now()) by which it must be answered. */
interface PendingWrite extends Waiter { op: Operation, args: unknown[], deadline: number }

export class WritePipeline {
  /** Writes asked for in this turn, and those still waiting for the write lock. */
  private outbox: PendingWrite[] = []
  private flushScheduled = false
  /** When the writes asked for in this turn must be answered: one clock reading per turn. */
  private turnDeadline = 0
  private lockRetry?: NodeJS.Timeout
  /** Why the last transaction could not begin: the lock error, repeated to the writes that then expire. */
  private lockError = 'database is locked'

  /** `committed` is told each commit's count of writes (group commit's factor). */
  constructor (private readonly writer: Writer, private readonly wal: WalSync, private readonly limits: { writesInFlight: number, writeTimeoutMs: number },
    private readonly stats: { transactions: number, writes: number }, private readonly committed: (writes: number) => void) {}

  /** Writes not yet committed: waiting for the end of this turn or for the write lock. */
  get waiting (): number {
    return this.outbox.length
  }

  write<T> (op: Operation, args: unknown[]): Promise<T> {
    if (this.wal.suspect !== undefined) return Promise.reject(new StoreUnavailableError(this.wal.suspect))
    if (this.outbox.length + this.wal.unsyncedWrites >= this.limits.writesInFlight) {
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

  /** Answers every write still waiting 503, unstored: the store closes and cannot wait for the lock any longer. */
  refuseWaiting (): void {
    const refusal = new StoreUnavailableError(`The store closed while the write waited for the database: ${this.lockError}`, 'deadline')
    for (const write of this.outbox) write.reject(refusal)
    this.outbox = []
  }

  /**
   * Commits every write asked for since the last flush and still within its deadline; those past
   * it are answered 503 without running, so a write answered 503 here is not stored. When
   * another connection holds the write lock, nothing runs: the writes wait for a later turn or
   * a short timer, each until its own deadline, and the event loop never sleeps on the lock.
   */
  flush (): void {
    this.flushScheduled = false
    if (this.lockRetry !== undefined) clearTimeout(this.lockRetry)
    this.lockRetry = undefined
    if (this.outbox.length === 0) return
    if (this.wal.suspect !== undefined) {
      const refusal = new StoreUnavailableError(this.wal.suspect)
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
    this.committed(live.length)
    this.wal.committedWrites(live.map((waiter, i) => ({ waiter, result: results[i] })), live[0].deadline)
  }
}
