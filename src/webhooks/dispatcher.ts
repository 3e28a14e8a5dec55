// The webhook dispatcher: a job of each server process, beside the requests. It makes deliveries
// out of the change log (the transactional outbox: a delivery exists because its change
// committed), leases the due ones, sends them with a cap on attempts in flight, and records each
// outcome with the next attempt's time. Every step is in the store, so a restart, or another
// instance, carries on where this one stopped.
import { defaultMaxListeners, setMaxListeners } from 'node:events'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { Feed } from '../changes/feed.js'
import type { AttemptOutcome, ClaimedDelivery, Outlook, WebhookStore } from '../store/webhooks.js'
import { nextAttemptAt, retryAfterMs } from './schedule.js'
import type { AttemptResult } from './sender.js'

/** Changes made deliveries per subscription per pass: a long backlog is taken in steps. */
const ENQUEUE_BATCH = 500
/** The longest a dispatcher sleeps: deliveries that other instances (or `retry`, `replay`) made due are found this late at most. */
const IDLE_MS = 1000
/** The shortest time between two passes under a stream of changes: each pass then takes what arrived meanwhile, together. */
const PASS_MS = 20
/** How long a pass waits while requests have the process (`busy`). */
const BUSY_PASS_MS = 250
/** After a store failure, the wait before the next pass. */
const BACKOFF_MS = 1000
/** At a stop, how long before its end the attempts still under way are abandoned, so that they are recorded within it (half a short stop). */
const ABANDON_MS = 500
/** A lease outlasts the receiver's time to answer by this much, so that only a sender that died loses its delivery to another. */
const LEASE_MARGIN_MS = 5000

export interface DispatcherOptions {
  store: WebhookStore
  feed: Feed
  log: Logger
  /** Sends one attempt; never rejects. `signal` abandons it (the server is stopping): it then resolves with `abandoned`. */
  send: (delivery: ClaimedDelivery, now: Date, signal: AbortSignal) => Promise<AttemptResult>
  /** The receiver's time to answer: a lease lasts this and a margin, so another sender takes over only from one that died. */
  timeoutMs: number
  /** Attempts in flight at most, in this process, and for one subscription across all. */
  maxInFlight: number
  perSubscription: number
  /** The clock and the jitter, injected by tests. */
  now?: () => Date
  random?: () => number
  /** Told of each outcome, for the metrics. */
  observe?: (outcome: AttemptOutcome) => void
  /** True while requests have the process (src/webhooks/load.ts): deliveries make way, each pass waiting BUSY_PASS_MS. */
  busy?: () => boolean
}

export class Dispatcher {
  private readonly now: () => Date
  private readonly inFlight = new Set<Promise<void>>()
  private readonly abandon = new AbortController()
  private outcomes: AttemptOutcome[] = []
  private wake?: () => void
  private stopped = false
  private running?: Promise<void>
  private failing = false
  /** The last pass left due deliveries for want of a place (the caps): the next waits for an attempt to end. */
  private capped = false
  /** Poked since the last pass began: the next does not wait. */
  private poked = false
  /** The store has ended the leases an earlier process left (WebhookStore.resume): done before the first claim. */
  private resumed = false
  /** The deletes cut short that this start finishes, beside the deliveries. */
  private finishing?: Promise<void>

  constructor (private readonly options: DispatcherOptions) {
    this.now = options.now ?? (() => new Date())
    // Each attempt in flight listens for the stop (Node warns past ten listeners): up to the cap,
    // by design, and an ended attempt's request may keep its listener a moment after the next starts.
    setMaxListeners(Math.max(defaultMaxListeners, 2 * options.maxInFlight), this.abandon.signal)
  }

  /** Attempts in flight now. */
  get attempts (): number {
    return this.inFlight.size
  }

  start (): void {
    this.running ??= this.loop()
  }

  /** Ends the current wait, or the next, at once: an attempt ended, or a subscription, a retry or a replay made here has work. */
  poke (): void {
    this.poked = true
    this.wake?.()
  }

  /**
   * Stops taking deliveries, and lets the pass and the attempts under way finish and be recorded,
   * all within `ms` (the store may be out of reach). Attempts still waiting for their receiver
   * near the end are abandoned, and recorded so, due again at once: their leases would otherwise
   * keep them from the next start, or another instance, until they ran out. What is left
   * unrecorded (the store out of reach) is attempted again once its lease ends.
   */
  async stop (ms: number): Promise<void> {
    this.stopped = true
    this.poke()
    const until = performance.now() + ms
    const within = async (work: Promise<unknown>, left: number): Promise<void> => {
      let timer: NodeJS.Timeout | undefined
      await Promise.race([work, new Promise<void>(resolve => { timer = setTimeout(resolve, Math.max(0, left)) })])
      clearTimeout(timer)
    }
    await within(Promise.all([this.running?.catch(() => {}), this.finishing, ...this.inFlight]), ms - Math.min(ABANDON_MS, ms / 2))
    this.abandon.abort()
    await within(Promise.all(this.inFlight), until - performance.now())
    await within(this.flush().catch(() => {}), until - performance.now())
  }

  /**
   * Finishes the deletes an earlier process began and did not end (killed between batches): to the
   * API those subscriptions are gone already. Beside the passes, so that a long one holds up no
   * delivery; one that fails (the store out of reach) is finished by the next start, or by a DELETE.
   */
  private async finishDeletes (): Promise<void> {
    try {
      for (const id of await this.options.store.beingDeleted()) {
        if (this.stopped) return
        await this.options.store.remove(id)
        this.options.log.info({ webhookId: id }, 'webhooks: a delete cut short is finished')
      }
    } catch (error) {
      this.options.log.warn({ cause: (error as Error).message }, 'webhooks: a delete cut short could not be finished; the next start tries again')
    }
  }

  private async loop (): Promise<void> {
    while (!this.stopped) {
      let outlook: Outlook | undefined
      try {
        outlook = await this.pass()
        this.recovered()
      } catch (error) {
        this.failed(error as Error)
      }
      await this.sleep(outlook)
    }
  }

  /**
   * One pass: make deliveries of the changes logged since the last; record the attempts that
   * ended and, in the same transaction, lease what is due as far as the caps allow; send it.
   * Answers where the work stood.
   */
  private async pass (): Promise<Outlook> {
    const { store } = this.options
    this.poked = false
    if (!this.resumed) {
      await store.resume(this.now())
      this.resumed = true
      this.finishing = this.finishDeletes()
    }
    const outlook = await store.outlook()
    let due = outlook.nextDue !== undefined && outlook.nextDue <= this.now()
    if (outlook.behind) due = await store.enqueue(this.now(), ENQUEUE_BATCH) > 0 || due
    const free = this.options.maxInFlight - this.inFlight.size
    const settled = this.outcomes
    this.outcomes = []
    try {
      // What is due and not leased waits for a place: an attempt that ends pokes the next pass.
      this.capped = due && free <= 0
      if (due && free > 0 && !this.stopped) {
        const now = this.now()
        const until = new Date(now.getTime() + this.options.timeoutMs + LEASE_MARGIN_MS)
        const claimed = await store.claim(now, until, { total: free, perSubscription: this.options.perSubscription }, settled)
        for (const delivery of claimed) this.send(delivery)
        this.capped = claimed.length < free
      } else if (settled.length > 0) {
        await store.record(settled)
      }
    } catch (error) {
      this.outcomes.unshift(...settled) // recorded at the next pass; until then their leases hold them
      throw error
    }
    for (const outcome of settled) this.options.observe?.(outcome)
    return outlook
  }

  private send (delivery: ClaimedDelivery): void {
    const at = this.now()
    const attempt = this.options.send(delivery, at, this.abandon.signal).then(result => {
      this.outcomes.push(this.judge(delivery, at, result))
    }).finally(() => {
      this.inFlight.delete(attempt)
      this.poke()
    })
    this.inFlight.add(attempt)
  }

  /**
   * What an attempt's result means for its delivery: delivered, due again, failed for good. A 410
   * disables the subscription and keeps its delivery pending, due at once: it goes, with the
   * others kept while disabled, when the subscription is enabled again.
   */
  private judge (delivery: ClaimedDelivery, at: Date, result: AttemptResult): AttemptOutcome {
    const { statusCode, error, durationMs } = result
    const attempt = { at, durationMs, ...(statusCode === undefined ? {} : { statusCode }), ...(error === undefined ? {} : { error }) }
    const base = { deliveryId: delivery.id, webhookId: delivery.webhookId, leaseUntil: delivery.leaseUntil, attempt }
    if (statusCode !== undefined && statusCode >= 200 && statusCode < 300) return { ...base, delivered: true }
    const after = this.now()
    if (result.abandoned === true) return { ...base, delivered: false, nextAt: after }
    if (statusCode === 410) return { ...base, delivered: false, nextAt: after, disable: 'The receiver answered 410 Gone.' }
    const nextAt = nextAttemptAt(delivery.attempts + 1, after, retryAfterMs(result.retryAfter, after), this.options.random)
    return { ...base, delivered: false, ...(nextAt === undefined ? {} : { nextAt }) }
  }

  /** Records the outcomes not yet recorded. */
  private async flush (): Promise<void> {
    if (this.outcomes.length === 0) return
    const settled = this.outcomes
    this.outcomes = []
    await this.options.store.record(settled)
    for (const outcome of settled) this.options.observe?.(outcome)
  }

  /**
   * Waits until there may be work: the next delivery due (IDLE_MS at most), the head moving past
   * what the pass saw (a change to deliver), an attempt ending, or a poke. Without subscriptions
   * it does not watch the head: a new one pokes, or is found within IDLE_MS.
   */
  private async sleep (outlook: Outlook | undefined): Promise<void> {
    if (this.stopped) return
    if (this.options.busy?.() === true) {
      await new Promise(resolve => setTimeout(resolve, BUSY_PASS_MS))
      return
    }
    if (this.poked) return
    let ms = outlook === undefined ? BACKOFF_MS : IDLE_MS
    if (outlook?.nextDue !== undefined && !this.capped) ms = Math.min(ms, outlook.nextDue.getTime() - this.now().getTime())
    if (outlook?.behind === true || this.outcomes.length > 0) ms = 0
    const started = performance.now()
    let moved = false
    if (ms > 0) {
      await new Promise<void>(resolve => {
        const timer = setTimeout(done, ms)
        function done (): void { clearTimeout(timer); resolve() }
        this.wake = done
        if (outlook !== undefined && outlook.subscriptions > 0) this.options.feed.beyond(outlook.head, ms).then(beyond => { moved = beyond; if (beyond) done() }, done)
      })
      this.wake = undefined
    }
    // Under a stream of changes, passes are spaced, so that each takes what arrived meanwhile,
    // together; an ended attempt (a poke) is taken at once.
    const spent = performance.now() - started
    if ((moved || ms <= 0) && !this.poked && spent < PASS_MS && !this.stopped) await new Promise(resolve => setTimeout(resolve, PASS_MS - spent))
  }

  private failed (error: Error): void {
    if (!this.failing) this.options.log.warn({ cause: error.message }, 'webhooks: the store cannot be reached; deliveries wait')
    this.failing = true
  }

  private recovered (): void {
    if (this.failing) this.options.log.info('webhooks: the store answers again; deliveries resume')
    this.failing = false
  }
}
