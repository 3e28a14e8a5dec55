import { randomUUID } from 'node:crypto'
import type { onRequestHookHandler } from 'fastify'
import type { Logger } from 'pino'
import { ApiError } from './errors.js'
import type { RateWindows } from './store/store.js'

export const WINDOW_MS = 60_000
/** How often counts with news are sent to the shared windows. */
const SYNC_EVERY_MS = 200
/**
 * A slice is at most this share of the limit, over twice the instances serving the token. What
 * the others have not seen of an instance's requests is at most two slices (those in a sync
 * under way and those since), so what no one has seen stays under a tenth of the limit.
 */
const SLICE_SHARE = 1 / 10
/**
 * A sync still under way after this long has its waiting tokens told the other instances' part
 * with a read (RateWindows.others), and they are decided on it, each within its slice. A sync
 * writes, and on PostgreSQL may wait its whole deadline to commit (for a synchronous standby
 * that is away: then it is given up on and cancelled); a request behind it would wait as long,
 * then for its own work.
 */
const PEEK_AFTER_MS = 250

/** One token in the current window, as this instance knows it. */
interface Count {
  /** Requests this instance accepted. */
  own: number
  /** `own` as the last answered sync stored it: the part of `own` that `known` includes. */
  synced: number
  /** The service-wide count that sync answered. */
  known: number
  /** Instances serving the token, by the last answer; undefined before any. */
  instances?: number
}

/** Called with nothing when the request may go on, or with the seconds to put in Retry-After. */
type Answer = (retryAfter?: number) => void

export interface RateLimiterOptions {
  /** Requests per token per one-minute window. */
  perMinute: number
  /** Where the instances of the service add up their counts; without it, this process counts alone. */
  shared?: RateWindows
  log?: Logger
  /** The clock, in ms since the epoch: windows are its whole minutes (instances' clocks are assumed in step, as NTP keeps them). */
  now?: () => number
  syncEveryMs?: number
}

/** The refusal of a request over the limit, with the seconds until the window ends. */
const rateLimited = (retryAfter: number): ApiError => new ApiError('rateLimited', undefined, { 'retry-after': String(retryAfter) })

/**
 * At most `perMinute` requests per token in each fixed one-minute window, for the service as a
 * whole; over it, 429 with Retry-After.
 *
 * With `shared` windows (PostgreSQL), each instance keeps its own counts and sends them a few
 * times a second, and a sync answers the service-wide total (`known`). An instance accepts on its
 * own only a slice of what is left: far from the limit a slice is large and requests cost no
 * database write; once it is used up, a request waits for a sync and is decided again, so near
 * the limit the last few requests each cost one. A request is refused only once the counts the
 * instance knows reach the limit, so a slice never refuses one that the limit allows. If a sync
 * fails (the database is down or slow), the instance counts alone, within its share of what was
 * left when it last knew, and shares again once a sync succeeds. Without `shared` (SQLite, one
 * process) it counts alone against the whole limit.
 */
export class RateLimiter {
  /** This process's name in the shared windows. */
  readonly instance = randomUUID()
  private readonly limit: number
  private readonly shared?: RateWindows
  private readonly log?: Logger
  private readonly now: () => number
  private window = -Infinity
  private counts = new Map<number, Count>()
  /** Tokens whose count rose since the last sync was sent. */
  private readonly dirty = new Set<number>()
  /** Requests waiting for a sync, per token, in arrival order. */
  private waiting = new Map<number, Answer[]>()
  private syncing = false
  private closed = false
  /** The most instances any sync has reported for a token: the share taken alone for a token not synced yet. */
  private widest = 1
  /** Syncs sent so far: a peek stands in for one of them only. */
  private syncsSent = 0
  /** Syncs failed in a row: while there are any, this instance counts alone. */
  private failures = 0
  private warnedAt = -Infinity
  private forgotten = -Infinity
  private readonly timer?: NodeJS.Timeout

  constructor ({ perMinute, shared, log, now = Date.now, syncEveryMs = SYNC_EVERY_MS }: RateLimiterOptions) {
    this.limit = perMinute
    this.shared = shared
    this.log = log
    this.now = now
    if (shared !== undefined) {
      this.timer = setInterval(() => { if (this.dirty.size > 0) this.sync() }, syncEveryMs)
      this.timer.unref()
    }
  }

  /**
   * The onRequest hook, after auth: a callback hook, so that a request decided at once costs no
   * promise and no closure; only one that must wait for a sync gets an answer to call later.
   */
  readonly hook: onRequestHookHandler = (request, _reply, done) => {
    if (request.token === undefined) return done()
    const id = request.token.id
    this.roll()
    const outcome = this.attempt(id)
    if (outcome === 'accepted') return done()
    if (outcome !== 'wait') return done(rateLimited(outcome))
    this.enqueue(id, retryAfter => { done(retryAfter === undefined ? undefined : rateLimited(retryAfter)) })
  }

  /** Decides a request of token `id`: at once if it can, else after a sync. */
  check (id: number, answer: Answer): void {
    this.roll()
    if (!this.settle(id, answer)) this.enqueue(id, answer)
  }

  /** Stops syncing; requests still waiting, and any after, are decided alone. */
  close (): void {
    clearInterval(this.timer)
    this.closed = true
    this.release()
  }

  /** Decides a request of token `id` and counts it if accepted: 'accepted', the seconds to wait if refused, or 'wait' for a sync. */
  private attempt (id: number): 'accepted' | 'wait' | number {
    const count = this.countOf(id)
    const decision = this.decide(count)
    if (decision === 'refuse') return this.retryAfter()
    if (decision === 'wait') return 'wait'
    count.own++
    if (this.shared !== undefined) this.dirty.add(id)
    return 'accepted'
  }

  /** Answers a request of token `id` if it can be decided now; false, without answering, if it must wait for a sync. */
  private settle (id: number, answer: Answer): boolean {
    const outcome = this.attempt(id)
    if (outcome === 'wait') return false
    answer(outcome === 'accepted' ? undefined : outcome)
    return true
  }

  /** Puts a request of token `id` in line for the next sync, and asks for one. */
  private enqueue (id: number, answer: Answer): void {
    const queue = this.waiting.get(id)
    if (queue === undefined) this.waiting.set(id, [answer])
    else queue.push(answer)
    this.sync()
  }

  private decide (count: Count): 'accept' | 'refuse' | 'wait' {
    const pending = count.own - count.synced
    if (count.known + pending >= this.limit) return 'refuse'
    if (this.shared === undefined) return 'accept'
    // Cut off from the others, each instance takes its share of what was left, so that together they keep to the limit.
    if (this.failures > 0 || this.closed) return pending < (this.limit - count.known) / (count.instances ?? this.widest) ? 'accept' : 'refuse'
    if (count.instances === undefined) return 'wait'
    return pending < this.slice(count.known, count.instances) ? 'accept' : 'wait'
  }

  /**
   * What this instance may accept past `known` before it syncs again: half of what is left shared
   * among the instances (so those that cannot see each other's slices yet still fit in it
   * together), at most SLICE_SHARE of the limit between them, and at least one request.
   */
  slice (known: number, instances: number): number {
    return Math.max(1, Math.floor(Math.min(this.limit - known, this.limit * SLICE_SHARE) / (2 * instances)))
  }

  private countOf (id: number): Count {
    let count = this.counts.get(id)
    if (count === undefined) {
      count = { own: 0, synced: 0, known: 0 }
      this.counts.set(id, count)
    }
    return count
  }

  /**
   * Starts a new window when the clock has left the current one. Tokens used in the last window
   * keep their instance count, so that their first requests need not wait for a sync.
   */
  private roll (): void {
    const now = this.now()
    if (now - this.window < WINDOW_MS) return
    const previous = this.counts
    this.window = now - (now % WINDOW_MS)
    this.counts = new Map()
    this.dirty.clear()
    for (const [id, count] of previous) {
      if (count.own > 0 && count.instances !== undefined) this.counts.set(id, { own: 0, synced: 0, known: 0, instances: count.instances })
    }
  }

  private retryAfter (): number {
    return Math.max(1, Math.ceil((this.window + WINDOW_MS - this.now()) / 1000))
  }

  /** Sends the counts with news and those requests wait on, unless a sync is under way (its end sends the rest). */
  private sync (): void {
    const shared = this.shared
    if (shared === undefined || this.syncing || this.closed) return
    const ids = new Set([...this.dirty, ...this.waiting.keys()])
    if (ids.size === 0) return
    this.syncing = true
    const window = this.window
    const sync = ++this.syncsSent
    const peek = setTimeout(() => { this.peek(window, sync) }, PEEK_AFTER_MS)
    const sent = new Map<number, number>()
    for (const id of ids) sent.set(id, this.countOf(id).own)
    this.dirty.clear()
    shared.sync(this.instance, window, window - WINDOW_MS, sent).then(answers => {
      if (this.failures > 0) this.log?.info({ failures: this.failures }, 'rate limit: counting with the other instances again')
      this.failures = 0
      if (window !== this.window) return
      for (const [id, { total, instances }] of answers) {
        const count = this.counts.get(id)
        if (count === undefined) continue
        count.synced = sent.get(id) ?? count.synced
        count.known = total
        count.instances = instances
        this.widest = Math.max(this.widest, instances)
      }
      if (this.forgotten < window) {
        this.forgotten = window
        // Once per window; a failure is the next one's to retry.
        shared.forget(window - WINDOW_MS).catch(() => {})
      }
    }, (error: unknown) => {
      this.failures++
      if (window === this.window) for (const id of sent.keys()) this.dirty.add(id)
      if (!this.closed) this.warn(error)
    }).finally(() => {
      clearTimeout(peek)
      this.syncing = false
      this.release()
      if (this.waiting.size > 0) this.sync()
    })
  }

  /**
   * Reads the other instances' part for the tokens that wait on the slow sync of `window` and have
   * never been synced here, and decides their requests on it (release): each accepts up to its
   * slice, as after a sync, and waits past it. What the others have not seen of this instance is
   * still at most two slices (this one and the one in the sync under way).
   */
  private peek (window: number, sync: number): void {
    const ids = [...this.waiting.keys()].filter(id => this.countOf(id).instances === undefined)
    if (this.shared === undefined || ids.length === 0) return
    this.shared.others(this.instance, window, window - WINDOW_MS, ids).then(answers => {
      // Only while the slow sync it stands in for is still under way.
      if (window !== this.window || !this.syncing || sync !== this.syncsSent) return
      for (const id of ids) {
        const count = this.counts.get(id)
        if (count === undefined || count.instances !== undefined) continue // synced meanwhile
        const others = answers.get(id)
        count.known = count.synced + (others?.total ?? 0)
        // Other instances' first syncs of the token may be stuck too, unseen: as many as served any.
        count.instances = Math.max(others?.instances ?? 1, this.widest)
      }
      this.release()
    }, () => {}) // the sync's own failure, at its deadline, is what counts
  }

  /** Decides again the requests waiting on a sync, in order, until one of a token must wait again. */
  private release (): void {
    this.roll()
    const waiting = this.waiting
    this.waiting = new Map()
    for (const [id, queue] of waiting) {
      const left = queue.findIndex(answer => !this.settle(id, answer))
      if (left !== -1) this.waiting.set(id, queue.slice(left))
    }
  }

  /** One warn line a second at most while syncs fail, with how many have failed since sharing stopped. */
  private warn (error: unknown): void {
    const now = performance.now()
    if (now - this.warnedAt < 1000) return
    this.warnedAt = now
    this.log?.warn({ cause: error instanceof Error ? error.message : String(error), failures: this.failures }, 'rate limit: cannot share counts with the other instances, counting alone')
  }
}
