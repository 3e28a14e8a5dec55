// What the stores keep of webhooks (SPEC section 5): subscriptions, and their deliveries, which
// come out of the change log. The dispatcher (src/webhooks/dispatcher.ts) decides when and what;
// the store keeps it durable and hands each due delivery to one sender at a time (a lease).
import { readFrom, type ChangeType, type LogBounds, type PlantRecord } from './store.js'

export interface Subscription {
  id: number
  url: string
  events: ChangeType[]
  tag?: string
  /** Set when the subscription was disabled (a 410, five days of failures), with why. */
  disabled?: { at: Date, reason: string }
  createdAt: Date
}

export interface NewSubscription { url: string, events: ChangeType[], tag?: string, secret: string }

export type DeliveryStatus = 'pending' | 'delivered' | 'failed'

/** One try of a delivery: when, how long, and the receiver's status code or why there was none. */
export interface Attempt { at: Date, durationMs: number, statusCode?: number, error?: string }

export interface Delivery {
  id: number
  webhookId: number
  position: bigint
  type: ChangeType
  plant: PlantRecord
  status: DeliveryStatus
  /** When the next attempt is due, while pending. */
  nextAt?: Date
  createdAt: Date
  attempts: Attempt[]
}

/** A delivery handed to a sender: what to send, where, and the secrets that sign it. */
export interface ClaimedDelivery {
  id: number
  webhookId: number
  position: bigint
  type: ChangeType
  plant: PlantRecord
  /** Attempts made before this one. */
  attempts: number
  url: string
  secrets: string[]
  /** The lease this delivery is held under: its outcome is recorded only while it still holds. */
  leaseUntil: Date
}

/** How an attempt ended, as the dispatcher judged it: delivered, due again at `nextAt`, or failed for good; and whether the subscription is now disabled. */
export interface AttemptOutcome {
  deliveryId: number
  webhookId: number
  /** The lease the attempt was made under (ClaimedDelivery.leaseUntil). */
  leaseUntil: Date
  attempt: Attempt
  delivered: boolean
  /** When to try again; absent when the delivery is delivered or has failed for good. */
  nextAt?: Date
  /** Disables the subscription with this reason (a 410 from the receiver). */
  disable?: string
}

export interface Outlook { head: bigint, subscriptions: number, behind: boolean, nextDue?: Date }

export interface WebhookStore {
  create (subscription: NewSubscription, now: Date): Promise<Subscription>
  list (): Promise<Subscription[]>
  get (id: number): Promise<Subscription | undefined>
  /**
   * Deletes the subscription and its deliveries, a batch at a time: from the first, it is gone to
   * every other operation (BEING_DELETED); false when there was none. A delete cut short (the
   * process killed) is finished by the next dispatcher's start (`beingDeleted`), or by another.
   */
  remove (id: number): Promise<boolean>
  /** The subscriptions whose delete began and has not ended. */
  beingDeleted (): Promise<number[]>
  /** Makes `secret` the signing secret; the one it replaces signs too until `previousUntil`. False when there is no such subscription. */
  rotate (id: number, secret: string, previousUntil: Date): Promise<boolean>
  /**
   * Enables a disabled subscription: its deliveries start from the head of the log (the changes
   * up to its disabling were made deliveries when it was disabled); pending ones are due at once.
   * An enabled one is left as it is.
   */
  enable (id: number, now: Date): Promise<Subscription | undefined>

  /** The subscription's deliveries, oldest first, with ids above `after` and of `status` if given. */
  deliveries (id: number, query: { status?: DeliveryStatus, after?: number, limit: number }): Promise<Delivery[]>
  /** Makes the delivery pending and due now; undefined when the subscription has no such delivery. */
  retry (id: number, deliveryId: number, now: Date): Promise<Delivery | undefined>
  /**
   * Queues again, as new deliveries, every change after `after` up to the subscription's cursor
   * that it matches (the changes past the cursor are made deliveries anyway), a batch at a time;
   * 'gone' when the log no longer holds them.
   */
  replay (id: number, after: bigint, now: Date): Promise<number | 'gone' | 'not-found'>

  /**
   * Makes deliveries of the changes logged since each enabled subscription's cursor (at most
   * `batch` changes a subscription), due at `now`; answers how many it made.
   */
  enqueue (now: Date, batch: number): Promise<number>
  /**
   * Leases up to `total` due deliveries of enabled subscriptions until `until`, no more than
   * `perSubscription` leased at once for one subscription (by anyone). The places are shared
   * (offers): subscriptions with fewest deliveries leased now first, then earliest due; each
   * is offered an equal part of what is left; within one, oldest due first. A leased
   * delivery is due again at `until`: if its attempt is never recorded (its sender died), it is
   * made again then. `settled` are recorded first, in the same transaction (as `record`): their
   * leases end, which frees their places for this claim.
   */
  claim (now: Date, until: Date, limits: { total: number, perSubscription: number }, settled?: AttemptOutcome[]): Promise<ClaimedDelivery[]>
  /**
   * Run once by a starting process's dispatcher, before its first claim. A store that one process
   * serves (SQLite) ends every lease still held, each left by a process that died holding it, and
   * makes those deliveries due at `now`: held, they would keep their places (perSubscription)
   * from the deliveries due. A shared store (PostgreSQL) keeps them: they may be a live instance's;
   * a dead one's run out by themselves. Answers how many leases it ended.
   */
  resume (now: Date): Promise<number>
  /**
   * Stores the attempts' outcomes and ends their leases, in one transaction. An outcome whose
   * lease no longer holds (recorded already, or ended and taken by another sender) is passed
   * over. Five days of failures, or a 410, disable a subscription; the changes logged up to then
   * are made its deliveries at once.
   */
  record (outcomes: AttemptOutcome[]): Promise<void>
  /**
   * Where the work stands, in one read: the log's head, the enabled subscriptions, whether any
   * has changes not yet made deliveries, and when the earliest pending delivery is due.
   */
  outlook (): Promise<Outlook>
  /** Pending deliveries due by `now`, and disabled subscriptions: for the metrics. */
  backlog (now: Date): Promise<{ due: number, disabled: number }>
  /** Drops delivered and failed deliveries made, and last attempted, before `before`, at most `batch`; answers how many. */
  prune (before: Date, batch: number): Promise<number>
}

/** Failing deliveries for this long, with no success between, disable a subscription (SPEC section 5). */
export const FAILING_LIMIT_MS = 5 * 86_400_000
export const FAILING_REASON = 'Every delivery failed for five days.'

/** How long the delivery log keeps a delivered or failed delivery after its last attempt (SPEC section 5). */
export const DELIVERY_LOG_MS = 30 * 86_400_000

/**
 * How a claim shares `total` places among the subscriptions waiting (due deliveries not leased),
 * which come fewest leased first (`leased`: how many each has leased now): each is offered an
 * equal part of what is left, within its own cap; then what some left unused is offered again to
 * those that took all they were offered. Yields which subscription to claim for and how many at
 * most, and is told how many it got. So a few slow receivers cannot hold every place while
 * another's first change waits, and no place stays empty while a subscription has more due.
 */
export function * offers (leased: number[], limits: { total: number, perSubscription: number }): Generator<{ index: number, limit: number }, void, number> {
  let left = limits.total
  const taken = leased.map(() => 0)
  const more = leased.map(() => true)
  for (let round = 0; round < 2; round++) {
    const open = leased.flatMap((_, index) => more[index] ? [index] : [])
    for (const [k, index] of open.entries()) {
      if (left <= 0) return
      const cap = limits.perSubscription - leased[index] - taken[index]
      const limit = Math.min(cap, round === 0 ? Math.ceil(left / (open.length - k)) : left)
      if (limit <= 0) {
        more[index] = false
        continue
      }
      const got = yield { index, limit }
      taken[index] += got
      left -= got
      if (got < limit) more[index] = false
    }
  }
}

/** Changes made deliveries, or deliveries deleted, per statement, where a request asks for many (replay, delete). */
export const WEBHOOK_BATCH = 1000

/**
 * Where a replay after `after` ends: at the subscription's cursor (the changes past it are made
 * deliveries anyway); for a disabled one, whose cursor stopped at its disabling, at the head
 * (enable moves the cursor there, past what the replay queues). 'gone' when the log no longer
 * holds the changes after `after`.
 */
export function replayEnd (after: bigint, subscription: { cursor: bigint, disabled: boolean }, bounds: LogBounds): bigint | 'gone' {
  if (readFrom(after, bounds) === 'gone') return 'gone'
  return subscription.disabled ? bounds.head : subscription.cursor
}

/** A replay of (after, end] a batch of positions at a time, each its own transaction (`deliver`); answers how many it queued. */
export async function replayInBatches (after: bigint, end: bigint, deliver: (from: bigint, to: bigint) => Promise<number>): Promise<number> {
  let queued = 0
  for (let from = after; from < end; from += BigInt(WEBHOOK_BATCH)) {
    queued += await deliver(from, from + BigInt(WEBHOOK_BATCH) < end ? from + BigInt(WEBHOOK_BATCH) : end)
  }
  return queued
}

/**
 * SQL for both stores, true of a change's `position` that webhooks no longer need, so that
 * retention may drop it (SPEC section 9: "as long as a webhook delivery still needs them"): every
 * enabled subscription has made its deliveries (its cursor is at or past it), and it is older than
 * the oldest delivery still pending for one, among the changes the log still holds. A disabled
 * subscription holds nothing; nor does a pending delivery whose change is gone already (an old one
 * retried): holding the changes after it would not bring its own back. One seek per subscription
 * (the index webhook_deliveries_pending), however long a backlog.
 */
export const DONE_WITH_BY_WEBHOOKS = `position <= (SELECT coalesce(min(cursor), 9223372036854775807) FROM webhooks WHERE disabled_at IS NULL)
  AND position < (SELECT coalesce(min((SELECT min(d.position) FROM webhook_deliveries d
    WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.position >= (SELECT coalesce(min(position), 0) FROM changes))), 9223372036854775807)
  FROM webhooks w WHERE w.disabled_at IS NULL)`

/**
 * The reason a subscription being deleted is disabled with. To the API it is gone from then on:
 * not shown, enabled, rotated or replayed; nothing is made or sent for it.
 */
export const BEING_DELETED = 'Being deleted.'
/** SQL, on both stores: a subscription row being deleted, and one that is not (the only kind the API sees or acts on). */
export const IS_BEING_DELETED = `disabled_reason = '${BEING_DELETED}'`
export const NOT_BEING_DELETED = `disabled_reason IS DISTINCT FROM '${BEING_DELETED}'`

/**
 * A delete a batch at a time: `retire` disables the subscription (BEING_DELETED) and deletes up
 * to WEBHOOK_BATCH of its deliveries, false when there is no such subscription; `remove` deletes
 * it once few are left. True once it was found: a delete that another finished meanwhile (a
 * starting instance finishing one cut short) has still done what it was asked.
 */
export async function removeInBatches (retire: () => Promise<number | false>, remove: () => Promise<boolean>): Promise<boolean> {
  let removed = await retire()
  if (removed === false) return false
  while (removed === WEBHOOK_BATCH) {
    removed = await retire()
    if (removed === false) return true // finished by another meanwhile
  }
  await remove()
  return true
}

/** What a batch of outcomes says of one subscription's failing streak, in the order they came. */
export interface Streak {
  webhookId: number
  /** A delivery succeeded: the streak ended. */
  succeeded: boolean
  /** The failures after the last success: when the first began and the last ended, and a disable asked for (a 410). */
  failures?: { from: Date, last: Date, disable?: string }
}

export function streaksOf (outcomes: AttemptOutcome[]): Streak[] {
  return [...new Set(outcomes.map(o => o.webhookId))].map(webhookId => {
    const own = outcomes.filter(o => o.webhookId === webhookId)
    const lastSuccess = own.map(o => o.delivered).lastIndexOf(true)
    const failed = own.slice(lastSuccess + 1)
    const disabling = failed.find(o => o.disable !== undefined)
    const disable = disabling?.disable
    // A failure is known once its attempt ended: a 410 disables from then on, and otherwise the
    // streak's last one says how long it has lasted.
    const end = (o: AttemptOutcome): Date => new Date(o.attempt.at.getTime() + Math.round(o.attempt.durationMs))
    const failures = failed.length === 0 ? undefined : { from: failed[0].attempt.at, last: end(disabling ?? failed[failed.length - 1]), ...(disable === undefined ? {} : { disable }) }
    return { webhookId, succeeded: lastSuccess >= 0, ...(failures === undefined ? {} : { failures }) }
  })
}

/** The columns both stores select for a subscription and for a delivery, in their rows' order. */
export const SUBSCRIPTION_COLUMNS = 'id, url, events, tag, disabled_at, disabled_reason, created_at'
export const DELIVERY_COLUMNS = 'id, webhook_id, position, type, plant_id, name, tag, status, attempts, next_at, created_at'
