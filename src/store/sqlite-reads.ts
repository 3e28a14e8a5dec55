// The SQLite store's reads: those asked for during one turn of the event loop run together, in
// one read transaction, at its end.
import type Database from 'better-sqlite3'
import { StoreUnavailableError } from '../errors.js'
import type { Answer, WalSync, Waiter } from './sqlite-wal.js'
import type { WriteResult } from './sqlite-writes.js'

/** A read's failure as the caller sees it: storage trouble, answered 503. */
function unavailable (error: unknown): StoreUnavailableError {
  return new StoreUnavailableError((error as Error).message)
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
export class ReadBatches {
  private pending: Array<Waiter & { query: () => unknown }> = []
  private readonly begin: Database.Statement
  private readonly end: Database.Statement

  /**
   * Reads on `db` (read-only; it must never sleep waiting for a lock), at most
   * `limits.readsPending` waiting; `wal` holds back answers that may show a commit not yet durable.
   */
  constructor (private readonly db: Database.Database, private readonly wal: WalSync, private readonly limits: { readsPending: number, writeTimeoutMs: number },
    private readonly stats: { readBatches: number, reads: number }) {
    this.begin = db.prepare('BEGIN')
    this.end = db.prepare('COMMIT')
  }

  read<T> (query: () => T): Promise<T> {
    if (this.pending.length >= this.limits.readsPending) {
      return Promise.reject(new StoreUnavailableError(`${this.limits.readsPending} reads are waiting, as many as the store takes on.`, 'capacity'))
    }
    return new Promise<T>((resolve, reject) => {
      this.pending.push({ query, resolve: resolve as (value: unknown) => void, reject })
      if (this.pending.length === 1) setImmediate(() => this.run())
    })
  }

  /** Runs the reads asked for so far (the store runs them at once when it closes). */
  run (): void {
    const batch = this.pending
    this.pending = []
    if (batch.length === 0) return
    try {
      this.begin.run()
    } catch (error) {
      for (const { reject } of batch) reject(unavailable(error))
      return
    }
    this.stats.readBatches++
    this.stats.reads += batch.length
    // The snapshot may hold commits whose fdatasync has not returned: then the answers wait for
    // it, as the writes' own answers do, so no answer shows a change before it is durable. Once
    // an fdatasync failed, no sync will come: reads answer what SQLite holds.
    const answers: Answer[] | undefined = this.wal.behind ? [] : undefined
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
      if (this.db.inTransaction) this.endSnapshot()
    }
    if (answers !== undefined) this.wal.afterLastCommit(answers, Date.now() + this.limits.writeTimeoutMs)
  }

  /** Ends a batch's snapshot. Ending a read hardly fails; if it does, a rollback ends it as well, so the next batch can begin. */
  private endSnapshot (): void {
    try {
      this.end.run()
    } catch {
      this.db.exec('ROLLBACK')
    }
  }
}
