// Webhooks in the SQLite store: the writes run in the write connection's transactions (group
// commit, like every write), the reads on the read connection. Times are ms since the epoch.
import type Database from 'better-sqlite3'
import { BOUNDS_SQL, rowToPlant } from './sqlite-rows.js'
import type { ChangeType, LogBounds } from './store.js'
import { BEING_DELETED, DELIVERY_COLUMNS, IS_BEING_DELETED, FAILING_LIMIT_MS, FAILING_REASON, NOT_BEING_DELETED, offers, removeInBatches, replayEnd, replayInBatches, streaksOf, SUBSCRIPTION_COLUMNS, WEBHOOK_BATCH, type AttemptOutcome, type ClaimedDelivery, type Delivery, type DeliveryStatus, type NewSubscription, type Outlook, type Subscription, type WebhookStore } from './webhooks.js'

interface SubscriptionRow { id: bigint, url: string, events: string, tag: string | null, disabled_at: bigint | null, disabled_reason: string | null, created_at: bigint }
interface DeliveryRow { id: bigint, webhook_id: bigint, position: bigint, type: ChangeType, plant_id: bigint, name: string, tag: string | null, status: DeliveryStatus, attempts: bigint, next_at: bigint }
interface AttemptRow { delivery_id: bigint, at: bigint, status_code: bigint | null, error: string | null, duration_ms: bigint }

function rowToSubscription (row: SubscriptionRow): Subscription {
  return {
    id: Number(row.id),
    url: row.url,
    events: row.events.split(' ') as ChangeType[],
    ...(row.tag === null ? {} : { tag: row.tag }),
    ...(row.disabled_at === null ? {} : { disabled: { at: new Date(Number(row.disabled_at)), reason: row.disabled_reason ?? '' } }),
    createdAt: new Date(Number(row.created_at))
  }
}

function rowToDelivery (row: DeliveryRow & { created_at: bigint }, attempts: AttemptRow[]): Delivery {
  return {
    id: Number(row.id),
    webhookId: Number(row.webhook_id),
    position: row.position,
    type: row.type,
    plant: rowToPlant([row.plant_id, row.name, row.tag]),
    status: row.status,
    ...(row.status === 'pending' ? { nextAt: new Date(Number(row.next_at)) } : {}),
    createdAt: new Date(Number(row.created_at)),
    attempts: attempts.map(attempt => ({
      at: new Date(Number(attempt.at)),
      durationMs: Number(attempt.duration_ms),
      ...(attempt.status_code === null ? {} : { statusCode: Number(attempt.status_code) }),
      ...(attempt.error === null ? {} : { error: attempt.error })
    }))
  }
}

/** The changes after a subscription's cursor that it matches, as pending deliveries due at $now: its events, and its tag before or after. */
const MATCHING = `FROM webhooks w JOIN changes c ON c.position > $after AND c.position <= $end
  WHERE w.id = $id AND w.${NOT_BEING_DELETED} AND instr(' ' || w.events || ' ', ' ' || c.type || ' ') > 0 AND (w.tag IS NULL OR c.tag = w.tag OR c.tag_before = w.tag)`
const INSERT_DELIVERIES = `INSERT INTO webhook_deliveries (webhook_id, position, type, plant_id, name, tag, status, next_at, created_at)
  SELECT w.id, c.position, c.type, c.plant_id, c.name, c.tag, 'pending', $now, $now ${MATCHING} ORDER BY c.position`

/** The webhook writes of the write connection: each runs inside a turn's transaction. */
export function webhookWrites (db: Database.Database) {
  const sql = {
    head: db.prepare('SELECT head FROM change_log').pluck(),
    bounds: db.prepare(BOUNDS_SQL),
    // The id is the next of those ever given (migration 005), never a deleted subscription's.
    nextId: db.prepare('UPDATE webhook_ids SET last = last + 1 RETURNING last').pluck(),
    insert: db.prepare(`INSERT INTO webhooks (id, url, events, tag, secret, cursor, created_at) VALUES (?, ?, ?, ?, ?, (SELECT head FROM change_log), ?) RETURNING ${SUBSCRIPTION_COLUMNS}`),
    retire: db.prepare(`UPDATE webhooks SET disabled_at = coalesce(disabled_at, ?), disabled_reason = '${BEING_DELETED}' WHERE id = ?`),
    removeDeliveries: db.prepare('DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE webhook_id = ? ORDER BY id LIMIT ?)'),
    remove: db.prepare('DELETE FROM webhooks WHERE id = ?'),
    rotate: db.prepare(`UPDATE webhooks SET previous_secret = secret, previous_until = ?, secret = ? WHERE id = ? AND ${NOT_BEING_DELETED}`),
    enable: db.prepare(`UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL, cursor = max(cursor, (SELECT head FROM change_log))
      WHERE id = ? AND disabled_at IS NOT NULL AND ${NOT_BEING_DELETED}`),
    // Those under an attempt now are left to its outcome: only a retry asked for brings them forward.
    dueNow: db.prepare("UPDATE webhook_deliveries SET next_at = min(next_at, $now) WHERE webhook_id = $id AND status = 'pending' AND lease_until <= $now"),
    retry: db.prepare(`UPDATE webhook_deliveries SET status = 'pending', next_at = ? WHERE id = ? AND webhook_id = ?
      AND webhook_id IN (SELECT id FROM webhooks WHERE ${NOT_BEING_DELETED})`),
    cursor: db.prepare('SELECT cursor FROM webhooks WHERE id = ?').pluck(),
    replayEnd: db.prepare(`SELECT cursor, disabled_at IS NOT NULL AS disabled FROM webhooks WHERE id = ? AND ${NOT_BEING_DELETED}`),
    enabled: db.prepare('SELECT id, cursor FROM webhooks WHERE disabled_at IS NULL AND cursor < ? ORDER BY id'),
    deliver: db.prepare(INSERT_DELIVERIES),
    advance: db.prepare('UPDATE webhooks SET cursor = ? WHERE id = ?'),
    // Those with due deliveries not leased, fewest leased now first, then earliest due (offers).
    waiting: db.prepare(`SELECT * FROM (SELECT id, url, secret, previous_secret, previous_until,
        (SELECT count(*) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.lease_until > $now) AS leased,
        (SELECT min(d.next_at) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.next_at <= $now AND d.lease_until <= $now) AS due
      FROM webhooks w WHERE disabled_at IS NULL) WHERE due IS NOT NULL ORDER BY leased, due, id`),
    resume: db.prepare("UPDATE webhook_deliveries SET lease_until = 0, next_at = min(next_at, $now) WHERE status = 'pending' AND lease_until > $now"),
    claim: db.prepare(`UPDATE webhook_deliveries SET next_at = $until, lease_until = $until WHERE id IN (
      SELECT id FROM webhook_deliveries WHERE webhook_id = $id AND status = 'pending' AND next_at <= $now AND lease_until <= $now ORDER BY next_at, id LIMIT $limit
    ) RETURNING ${DELIVERY_COLUMNS}`),
    // Only while the lease the attempt was made under holds: an outcome is recorded once. A retry
    // asked for during the attempt (its next_at moved before the lease's end) stands, unless the
    // attempt delivered.
    settle: db.prepare(`UPDATE webhook_deliveries SET status = CASE WHEN $status <> 'delivered' AND next_at < lease_until THEN 'pending' ELSE $status END,
      attempts = attempts + 1, next_at = CASE WHEN next_at < lease_until THEN next_at ELSE coalesce($nextAt, next_at) END, lease_until = 0
      WHERE id = $id AND lease_until = $leaseUntil`),
    attempt: db.prepare('INSERT INTO webhook_attempts (delivery_id, at, status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?)'),
    succeeded: db.prepare('UPDATE webhooks SET failing_since = NULL WHERE id = ? AND failing_since IS NOT NULL'),
    failed: db.prepare('UPDATE webhooks SET failing_since = coalesce(failing_since, ?) WHERE id = ?'),
    disable: db.prepare('UPDATE webhooks SET disabled_at = $at, disabled_reason = $reason WHERE id = $id AND disabled_at IS NULL AND ($forced OR failing_since <= $at - $limit)'),
    prune: db.prepare(`DELETE FROM webhook_deliveries WHERE id IN (
      SELECT id FROM webhook_deliveries d WHERE status <> 'pending' AND created_at < $before
        AND NOT EXISTS (SELECT 1 FROM webhook_attempts a WHERE a.delivery_id = d.id AND a.at >= $before) ORDER BY id LIMIT $batch)`)
  }
  /** Makes subscription `id`'s changes in (cursor, end] deliveries due at `now`, and moves its cursor to `end`. */
  const deliverUpTo = (id: bigint | number, cursor: bigint, end: bigint, now: number): number => {
    const made = sql.deliver.run({ id, after: cursor, end, now }).changes
    sql.advance.run(end, id)
    return made
  }
  const record = (outcomes: AttemptOutcome[]): void => {
    const recorded = outcomes.filter(({ deliveryId, leaseUntil, attempt, delivered, nextAt }) => {
      const status = delivered ? 'delivered' : nextAt === undefined ? 'failed' : 'pending'
      if (sql.settle.run({ status, nextAt: nextAt?.getTime() ?? null, id: deliveryId, leaseUntil: leaseUntil.getTime() }).changes === 0) return false
      sql.attempt.run(deliveryId, attempt.at.getTime(), attempt.statusCode ?? null, attempt.error ?? null, Math.round(attempt.durationMs))
      return true
    })
    // A success ends a subscription's failing streak; five days of it, or a 410, disable it.
    for (const { webhookId, succeeded, failures } of streaksOf(recorded)) {
      if (succeeded) sql.succeeded.run(webhookId)
      if (failures === undefined) continue
      sql.failed.run(failures.from.getTime(), webhookId)
      const at = failures.last.getTime()
      if (sql.disable.run({ id: webhookId, at, reason: failures.disable ?? FAILING_REASON, forced: failures.disable === undefined ? 0 : 1, limit: FAILING_LIMIT_MS }).changes === 1) {
        deliverUpTo(webhookId, sql.cursor.get(webhookId) as bigint, sql.head.get() as bigint, at)
      }
    }
  }
  return {
    webhookCreate: (subscription: NewSubscription, now: number): Subscription =>
      rowToSubscription(sql.insert.get(sql.nextId.get(), subscription.url, subscription.events.join(' '), subscription.tag ?? null, subscription.secret, now) as SubscriptionRow),
    /** Disables the subscription and deletes up to `batch` of its deliveries; false when there is none. */
    webhookRetire: (id: number, now: number, batch: number): number | false =>
      sql.retire.run(now, id).changes === 1 && sql.removeDeliveries.run(id, batch).changes,
    webhookRemove: (id: number): boolean => sql.remove.run(id).changes === 1,
    webhookRotate: (id: number, secret: string, previousUntil: number): boolean => sql.rotate.run(previousUntil, secret, id).changes === 1,
    // Only a disabled subscription moves: an enabled one keeps its cursor and its schedule.
    webhookEnable: (id: number, now: number): boolean => {
      if (sql.enable.run(id).changes === 1) sql.dueNow.run({ now, id })
      return sql.cursor.get(id) !== undefined
    },
    webhookRetry: (id: number, deliveryId: number, now: number): boolean => sql.retry.run(now, deliveryId, id).changes === 1,
    /** Where a replay after `after` ends (the subscription's cursor), 'gone' or 'not-found'. */
    webhookReplayEnd: (id: number, after: bigint): bigint | 'gone' | 'not-found' => {
      const subscription = sql.replayEnd.get(id) as { cursor: bigint, disabled: bigint } | undefined
      if (subscription === undefined) return 'not-found'
      return replayEnd(after, { cursor: subscription.cursor, disabled: subscription.disabled === 1n }, sql.bounds.get() as LogBounds)
    },
    webhookReplay: (id: number, after: bigint, end: bigint, now: number): number => sql.deliver.run({ id, after, end, now }).changes,
    webhookEnqueue: (now: number, batch: number): number => {
      const head = sql.head.get() as bigint
      let made = 0
      for (const { id, cursor } of sql.enabled.all(head) as Array<{ id: bigint, cursor: bigint }>) {
        made += deliverUpTo(id, cursor, cursor + BigInt(batch) < head ? cursor + BigInt(batch) : head, now)
      }
      return made
    },
    webhookClaim: (now: number, until: number, limits: { total: number, perSubscription: number }, settled: AttemptOutcome[]): ClaimedDelivery[] => {
      record(settled)
      const claimed: ClaimedDelivery[] = []
      type Row = { id: bigint, url: string, secret: string, previous_secret: string | null, previous_until: bigint | null, leased: bigint }
      const waiting = sql.waiting.all({ now }) as Row[]
      const plan = offers(waiting.map(subscription => Number(subscription.leased)), limits)
      let offer = plan.next()
      while (offer.done !== true) {
        const subscription = waiting[offer.value.index]
        const secrets = subscription.previous_secret !== null && Number(subscription.previous_until) > now ? [subscription.secret, subscription.previous_secret] : [subscription.secret]
        const rows = sql.claim.all({ id: subscription.id, now, until, limit: offer.value.limit }) as DeliveryRow[]
        for (const row of rows) {
          claimed.push({ id: Number(row.id), webhookId: Number(row.webhook_id), position: row.position, type: row.type, plant: rowToPlant([row.plant_id, row.name, row.tag]), attempts: Number(row.attempts), url: subscription.url, secrets, leaseUntil: new Date(until) })
        }
        offer = plan.next(rows.length)
      }
      return claimed
    },
    webhookRecord: record,
    webhookResume: (now: number): number => sql.resume.run({ now }).changes,
    webhookPrune: (before: number, batch: number): number => sql.prune.run({ before, batch }).changes
  }
}

/** The webhook reads of the read connection. */
export function webhookReads (db: Database.Database) {
  const sql = {
    list: db.prepare(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhooks WHERE ${NOT_BEING_DELETED} ORDER BY id`),
    get: db.prepare(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhooks WHERE id = ? AND ${NOT_BEING_DELETED}`),
    beingDeleted: db.prepare(`SELECT id FROM webhooks WHERE ${IS_BEING_DELETED} ORDER BY id`).pluck(),
    deliveries: db.prepare(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries
      WHERE webhook_id = $id AND id > $after AND ($status IS NULL OR status = $status) ORDER BY id LIMIT $limit`),
    delivery: db.prepare(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries WHERE id = ? AND webhook_id = ?`),
    attempts: db.prepare('SELECT delivery_id, at, status_code, error, duration_ms FROM webhook_attempts WHERE delivery_id IN (SELECT value FROM json_each(?)) ORDER BY rowid'),
    // Per subscription, the earliest due from its index: never a scan of every pending delivery.
    outlook: db.prepare(`SELECT l.head, count(w.id) AS subscriptions, coalesce(max(w.cursor < l.head), 0) AS behind,
      min((SELECT min(d.next_at) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending')) AS next_due
      FROM change_log l LEFT JOIN webhooks w ON w.disabled_at IS NULL GROUP BY l.head`),
    due: db.prepare("SELECT count(*) FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id AND w.disabled_at IS NULL WHERE d.status = 'pending' AND d.next_at <= ?").pluck(),
    disabled: db.prepare(`SELECT count(*) FROM webhooks WHERE disabled_at IS NOT NULL AND ${NOT_BEING_DELETED}`).pluck()
  }
  const withAttempts = (rows: Array<DeliveryRow & { created_at: bigint }>): Delivery[] => {
    const attempts = sql.attempts.all(JSON.stringify(rows.map(row => Number(row.id)))) as AttemptRow[]
    return rows.map(row => rowToDelivery(row, attempts.filter(attempt => attempt.delivery_id === row.id)))
  }
  return {
    list: (): Subscription[] => (sql.list.all() as SubscriptionRow[]).map(rowToSubscription),
    beingDeleted: (): number[] => (sql.beingDeleted.all() as Array<number | bigint>).map(Number),
    get: (id: number): Subscription | undefined => {
      const row = sql.get.get(id) as SubscriptionRow | undefined
      return row === undefined ? undefined : rowToSubscription(row)
    },
    deliveries: (id: number, { status, after, limit }: { status?: DeliveryStatus, after?: number, limit: number }): Delivery[] =>
      withAttempts(sql.deliveries.all({ id, after: after ?? 0, status: status ?? null, limit }) as Array<DeliveryRow & { created_at: bigint }>),
    delivery: (id: number, deliveryId: number): Delivery | undefined => {
      const row = sql.delivery.get(deliveryId, id) as (DeliveryRow & { created_at: bigint }) | undefined
      return row === undefined ? undefined : withAttempts([row])[0]
    },
    outlook: (): Outlook => {
      const row = sql.outlook.get() as { head: bigint, subscriptions: bigint, behind: bigint, next_due: bigint | null }
      return { head: row.head, subscriptions: Number(row.subscriptions), behind: row.behind === 1n, ...(row.next_due === null ? {} : { nextDue: new Date(Number(row.next_due)) }) }
    },
    backlog: (now: number): { due: number, disabled: number } => ({ due: Number(sql.due.get(now)), disabled: Number(sql.disabled.get()) })
  }
}

/** The store's WebhookStore over its write pipeline (`write`, by operation name) and its read batches (`read`). */
export function sqliteWebhooks (write: <T>(op: keyof ReturnType<typeof webhookWrites>, ...args: unknown[]) => Promise<T>,
  read: <T>(query: (reads: ReturnType<typeof webhookReads>) => T) => Promise<T>): WebhookStore {
  return {
    create: (subscription, now) => write('webhookCreate', subscription, now.getTime()),
    list: () => read(reads => reads.list()),
    get: (id) => read(reads => reads.get(id)),
    remove: (id) => removeInBatches(() => write('webhookRetire', id, Date.now(), WEBHOOK_BATCH), () => write('webhookRemove', id)),
    beingDeleted: () => read(reads => reads.beingDeleted()),
    rotate: (id, secret, previousUntil) => write('webhookRotate', id, secret, previousUntil.getTime()),
    enable: async (id, now) => await write<boolean>('webhookEnable', id, now.getTime()) ? await read(reads => reads.get(id)) : undefined,
    deliveries: (id, query) => read(reads => reads.deliveries(id, query)),
    retry: async (id, deliveryId, now) => await write<boolean>('webhookRetry', id, deliveryId, now.getTime()) ? await read(reads => reads.delivery(id, deliveryId)) : undefined,
    replay: async (id, after, now) => {
      const end = await write<bigint | 'gone' | 'not-found'>('webhookReplayEnd', id, after)
      return typeof end !== 'bigint' ? end : await replayInBatches(after, end, (from, to) => write('webhookReplay', id, from, to, now.getTime()))
    },
    enqueue: (now, batch) => write('webhookEnqueue', now.getTime(), batch),
    claim: (now, until, limits, settled = []) => write('webhookClaim', now.getTime(), until.getTime(), limits, settled),
    record: (outcomes) => write('webhookRecord', outcomes),
    resume: (now) => write('webhookResume', now.getTime()),
    outlook: () => read(reads => reads.outlook()),
    backlog: (now) => read(reads => reads.backlog(now.getTime())),
    prune: (before, batch) => write('webhookPrune', before.getTime(), batch)
  }
}
