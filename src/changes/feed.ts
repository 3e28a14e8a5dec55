import type { Logger } from 'pino'
import { CHANGE_TYPES, type ChangeType, type Store } from '../store/store.js'

/** How often, while readers wait, the feed asks the store for the log's head: changes made by other processes arrive this late at most. */
export const POLL_MS = 50

export interface FeedOptions {
  store: Store
  /** Streams open and polls waiting, together, at most; past it, `admit` refuses. */
  maxReaders: number
  log: Logger
}

/**
 * Where the change log's head stands, as this process knows it, and the readers waiting for it
 * to move: streams and long polls. A write made here moves it at once (`written`); while anyone
 * waits, the store is asked every POLL_MS, for the writes of other instances and processes.
 * Readers read the log from the store themselves; the feed only tells them when to.
 */
export class Feed {
  private head = -1n
  private waiters = new Set<() => void>()
  private poller?: NodeJS.Timeout
  private polling = false
  private failing = false
  private closed = false
  /** Told once the server stops: a stream waiting on a reader that does not read waits no longer. */
  private readonly stopListeners = new Set<() => void>()
  /** Readers admitted and not yet released, by kind. */
  readonly open = { streams: 0, polls: 0 }
  /** Changes this process wrote, by type (the metrics read them when scraped). */
  readonly writtenByType = Object.fromEntries(CHANGE_TYPES.map(type => [type, 0])) as Record<ChangeType, number>

  constructor (private readonly options: FeedOptions) {}

  /** Takes a reader's place, or false when `maxReaders` are open (or the server is stopping): answer 503. */
  admit (kind: 'streams' | 'polls'): boolean {
    if (this.closed || this.open.streams + this.open.polls >= this.options.maxReaders) return false
    this.open[kind]++
    return true
  }

  release (kind: 'streams' | 'polls'): void {
    this.open[kind]--
  }

  /** A write of this process committed the change of `type` at `position`. */
  written (position: bigint, type: ChangeType): void {
    this.writtenByType[type]++
    if (position > this.head) this.moved(position)
  }

  /** True when the head, as last seen, is past `position`: there is more to read. */
  past (position: bigint): boolean {
    return this.head > position
  }

  /**
   * Resolves once the head may have moved past `position` (a change written here or seen by the
   * poll), after `ms` at the latest, or at once when the server is stopping. True if it moved.
   */
  async beyond (position: bigint, ms: number): Promise<boolean> {
    const deadline = performance.now() + ms
    while (!this.past(position)) {
      const left = deadline - performance.now()
      if (this.closed || left <= 0) return false
      await this.moveOrTimeout(left)
    }
    return true
  }

  /** Resolves at the head's next move, or after `ms`. */
  private async moveOrTimeout (ms: number): Promise<void> {
    let wake!: () => void
    const moved = new Promise<void>(resolve => { wake = resolve })
    const timer = setTimeout(wake, ms)
    this.waiters.add(wake)
    this.startPolling()
    try {
      await moved
    } finally {
      clearTimeout(timer)
      this.waiters.delete(wake)
      if (this.waiters.size === 0) this.stopPolling()
    }
  }

  /** True once `close` was called: readers end their answers. */
  get closing (): boolean {
    return this.closed
  }

  /** Wakes every waiting reader for the last time: streams end, polls answer what they have. */
  close (): void {
    this.closed = true
    this.stopPolling()
    this.wakeAll()
    for (const listener of this.stopListeners) listener()
    this.stopListeners.clear()
  }

  /** Calls `listener` once the server stops (at once if it has); the function returned forgets it. */
  whenStopped (listener: () => void): () => void {
    if (this.closed) {
      listener()
      return () => {}
    }
    this.stopListeners.add(listener)
    return () => { this.stopListeners.delete(listener) }
  }

  private moved (head: bigint): void {
    if (head === this.head) return
    // An import starts the log anew above its head; a restored backup may even hold an older one. Readers find out which.
    this.head = head
    this.wakeAll()
  }

  private wakeAll (): void {
    if (this.waiters.size === 0) return
    const waiters = [...this.waiters]
    this.waiters.clear()
    for (const wake of waiters) wake()
  }

  private startPolling (): void {
    if (this.poller !== undefined || this.closed) return
    this.poller = setInterval(() => { this.poll() }, POLL_MS)
    this.poll()
  }

  private stopPolling (): void {
    clearInterval(this.poller)
    this.poller = undefined
  }

  private poll (): void {
    if (this.polling) return
    this.polling = true
    this.options.store.logBounds().then(({ head }) => {
      this.failing = false
      this.moved(head)
    }, (error: Error) => {
      // The store is out of reach: readers wait on; one line when it starts, not one a poll.
      if (!this.failing) this.options.log.warn({ cause: error.message }, 'change feed: cannot read the log\'s head')
      this.failing = true
    }).finally(() => { this.polling = false })
  }
}
