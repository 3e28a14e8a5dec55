// Durability of the SQLite store's answers: each commit's answers (and the answers of reads that
// may have seen it) go out only once an fdatasync of the WAL, begun after that commit, returns.
// docs/durability.md argues why that suffices.
import { fdatasync } from 'node:fs'
import { StoreUnavailableError } from '../errors.js'
import { describe } from './describe.js'
import { isUnavailable } from './sqlite-errors.js'
import type { WriteResult } from './sqlite-writes.js'

/** How often the backstop looks for answers whose fdatasync has not come back past their deadline, in ms. */
export const SWEEP_MS = 250

/** A caller waiting for the store: the settling functions of its promise. */
export interface Waiter { resolve: (value: unknown) => void, reject: (error: Error) => void }

/** A caller and how its operation ended, to be told once the commit it may have seen is durable. */
export interface Answer { waiter: Waiter, result: WriteResult }

/** A write's failure as the caller sees it: storage trouble is 503, anything else (a bug) stays an Error (500). */
export function failureOf (error: unknown): Error {
  return isUnavailable(error) ? new StoreUnavailableError(describe(error)) : new Error(describe(error))
}

/**
 * Answers waiting for the fdatasync that makes commit number `commit` durable: the writes of
 * that commit (with their results) and the reads that may have seen it. `answered` once the
 * backstop answered them 503; they still count against the cap until the fdatasync returns.
 */
interface AwaitingSync {
  commit: number
  deadline: number
  writes: number
  answers: Answer[]
  answered: boolean
}

/**
 * The commits of the write connection and the fdatasyncs that make them durable: one runs at a
 * time, on libuv's thread pool, and covers every commit made before it began; the commits made
 * meanwhile wait for the next one.
 */
export class WalSync {
  /** The fdatasync used; a test may put a failing or hanging one in its place. */
  syncWal: (fd: number, callback: (error: NodeJS.ErrnoException | null) => void) => void = fdatasync
  /** Commits made, and the last one an fdatasync covered. */
  private committed = 0
  private synced = 0
  private syncing = false
  private awaiting: AwaitingSync[] = []
  /** Writes committed but not yet covered by an fdatasync (answered or not): they count against the cap. */
  private unsynced = 0
  /** Set for good once an fdatasync of the WAL failed: no write is answered 200 after that. */
  private failed?: string
  private sweeper?: NodeJS.Timeout
  /** Called once the last answer waiting for an fdatasync went out, while the store closes. */
  private drained?: () => void

  /**
   * `fd` is an fd of the -wal file; `stats.syncs` counts the fdatasyncs; `onSynced` is called after
   * each one that returned (the store then looks at the WAL's size, for a checkpoint). `lostFiles`
   * tells why the synced commits may still not last (the files were removed under the store), or
   * undefined: asked after every fdatasync, before its answers go out.
   */
  constructor (private readonly fd: number, private readonly stats: { syncs: number }, private readonly onSynced: () => void,
    private readonly lostFiles: () => string | undefined) {
    this.sweeper = setInterval(() => this.expireAnswers(), SWEEP_MS).unref()
  }

  /** Why writes are refused for good (an fdatasync failed), if they are. */
  get suspect (): string | undefined {
    return this.failed
  }

  /** Writes committed and not yet made durable. */
  get unsyncedWrites (): number {
    return this.unsynced
  }

  /** True when a read now may see a commit whose fdatasync has not returned (and one still may: none failed). */
  get behind (): boolean {
    return this.synced !== this.committed && this.failed === undefined
  }

  /** A commit carrying `answers` (one per write) was made: they go out once it is durable, or 503 past `deadline`. */
  committedWrites (answers: Answer[], deadline: number): void {
    this.unsynced += answers.length
    this.awaiting.push({ commit: ++this.committed, deadline, writes: answers.length, answers, answered: false })
    this.sync()
  }

  /** Reads that may have seen the last commit: they go out once it is durable. */
  afterLastCommit (answers: Answer[], deadline: number): void {
    this.awaiting.push({ commit: this.committed, deadline, writes: 0, answers, answered: false })
    this.sync()
  }

  /**
   * Starts an fdatasync of the WAL unless one runs already; it covers every commit made before it
   * starts. When it returns, the answers waiting for those commits go out, and the commits made
   * meanwhile get the next one.
   */
  private sync (): void {
    if (this.syncing || this.synced === this.committed || this.failed !== undefined) return
    const target = this.committed
    this.syncing = true
    this.stats.syncs++
    this.syncWal(this.fd, (error) => {
      this.syncing = false
      if (error !== null) return this.refuseFromNowOn(`The fdatasync of the WAL failed (${describe(error)}); writes are refused until the service restarts.`)
      const lost = this.lostFiles()
      if (lost !== undefined) return this.refuseFromNowOn(`${lost}; writes are refused until the service restarts.`)
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
      if (this.awaiting.length === 0) this.drained?.()
      this.sync()
      this.onSynced()
    })
  }

  /**
   * An fdatasync of the WAL failed (EIO, ENOSPC…): the kernel may have dropped the pages it could
   * not write and will not report it again, so no later sync proves them on disk. Or the files
   * were removed (or replaced) under the store: what it writes goes to files that no one can open
   * again. Either way every answer waiting is 503, and from now on so is every write, until the
   * service restarts (and SQLite's recovery checks the WAL frame by frame).
   */
  private refuseFromNowOn (reason: string): void {
    this.failed = reason
    // Committed, and not known to be on disk: these writes may be there after the restart, or not.
    const refusal = new StoreUnavailableError(this.failed, 'unavailable', true)
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
      const refusal = new StoreUnavailableError('The write\'s fdatasync did not return by its deadline; the write may still be stored.', 'deadline', true)
      for (const { waiter } of batch.answers) waiter.reject(refusal)
    }
  }

  /**
   * Waits until every answer waiting for an fdatasync went out; a hung fdatasync must not hold
   * the stop forever: past `ms` (the deadline), the backstop has answered them.
   */
  async drain (ms: number): Promise<void> {
    clearInterval(this.sweeper)
    this.sweeper = undefined
    if (this.awaiting.length === 0) return
    const drained = new Promise<void>(resolve => { this.drained = resolve })
    const sweep = setInterval(() => this.expireAnswers(), SWEEP_MS)
    await Promise.race([drained, new Promise(resolve => setTimeout(resolve, ms + SWEEP_MS))])
    clearInterval(sweep)
    this.expireAnswers()
  }
}
