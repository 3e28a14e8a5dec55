// Webhooks in the PostgreSQL store. Several instances share the work: making deliveries out of
// the log takes the subscriptions' rows (FOR UPDATE), so no change is made a delivery twice; a
// claim leases deliveries (FOR UPDATE SKIP LOCKED), so each is attempted by one instance at a
// time, and by another once the lease has run out (an instance that died mid-attempt).
import type pg from 'pg'
import { UnstorableTextError } from '../errors.js'
import { rowToPlant } from './postgres-rows.js'
import type { ChangeType, LogBounds } from './store.js'
import { BEING_DELETED, DELIVERY_COLUMNS, FAILING_LIMIT_MS, FAILING_REASON, IS_BEING_DELETED, NOT_BEING_DELETED, offers, removeInBatches, replayEnd, replayInBatches, streaksOf, SUBSCRIPTION_COLUMNS, WEBHOOK_BATCH, type AttemptOutcome, type ClaimedDelivery, type Delivery, type DeliveryStatus, type Subscription, type WebhookStore } from './webhooks.js'

interface SubscriptionRow { id: bigint, url: string, events: string, tag: string | null, disabled_at: Date | null, disabled_reason: string | null, created_at: Date }
interface DeliveryRow { id: bigint, webhook_id: bigint, position: bigint, type: ChangeType, plant_id: bigint, name: string, tag: string | null, status: DeliveryStatus, attempts: number, next_at: Date, created_at: Date }
interface AttemptRow { delivery_id: bigint, at: Date, status_code: number | null, error: string | null, duration_ms: number }

function rowToSubscription (row: SubscriptionRow): Subscription {
  return {
    id: Number(row.id),
    url: row.url,
    events: row.events.split(' ') as ChangeType[],
    ...(row.tag === null ? {} : { tag: row.tag }),
    ...(row.disabled_at === null ? {} : { disabled: { at: row.disabled_at, reason: row.disabled_reason ?? '' } }),
    createdAt: row.created_at
  }
}

function rowToDelivery (row: DeliveryRow, attempts: AttemptRow[]): Delivery {
  return {
    id: Number(row.id),
    webhookId: Number(row.webhook_id),
    position: row.position,
    type: row.type,
    plant: rowToPlant({ id: row.plant_id, name: row.name, tag: row.tag }),
    status: row.status,
    ...(row.status === 'pending' ? { nextAt: row.next_at } : {}),
    createdAt: row.created_at,
    attempts: attempts.map(attempt => ({
      at: attempt.at,
      durationMs: attempt.duration_ms,
      ...(attempt.status_code === null ? {} : { statusCode: attempt.status_code }),
      ...(attempt.error === null ? {} : { error: attempt.error })
    }))
  }
}

/** The changes in ($2, $3] that subscription $1 matches (its events, its tag before or after), made pending deliveries due at $4. */
const DELIVER_SQL = `INSERT INTO webhook_deliveries (webhook_id, position, type, plant_id, name, tag, status, next_at, created_at)
  SELECT w.id, c.position, c.type, c.plant_id, c.name, c.tag, 'pending', $4, $4
  FROM webhooks w JOIN changes c ON c.position > $2 AND c.position <= $3
  WHERE w.id = $1 AND w.${NOT_BEING_DELETED} AND position(' ' || c.type || ' ' IN ' ' || w.events || ' ') > 0 AND (w.tag IS NULL OR c.tag = w.tag OR c.tag_before = w.tag)
  ORDER BY c.position`

/** Leases up to $4 of subscription $1's deliveries due at $2, until $3; rows another instance is leasing now are passed over. */
const CLAIM_SQL = `WITH picked AS MATERIALIZED (
    SELECT id FROM webhook_deliveries WHERE webhook_id = $1 AND status = 'pending' AND next_at <= $2 AND lease_until <= $2
      AND EXISTS (SELECT 1 FROM webhooks WHERE id = $1 AND disabled_at IS NULL) -- not disabled since the subscriptions were read
    ORDER BY next_at, id LIMIT $4 FOR UPDATE SKIP LOCKED
  )
  UPDATE webhook_deliveries d SET next_at = $3, lease_until = $3 FROM picked WHERE d.id = picked.id
  RETURNING ${DELIVERY_COLUMNS.split(', ').map(column => `d.${column}`).join(', ')}`

/**
 * Every outcome's delivery's new state and, for those settled, its attempt, in one statement. A
 * delivery is settled only while the lease the attempt was made under holds: an outcome is
 * recorded once, and never over another sender's lease. A retry asked for during the attempt
 * (its next_at moved before the lease's end) stands, unless the attempt delivered.
 */
const RECORD_SQL = `WITH o AS (
    SELECT * FROM unnest($1::int8[], $2::timestamptz[], $3::int4[], $4::text[], $5::int4[], $6::text[], $7::timestamptz[], $8::timestamptz[])
      AS o (delivery_id, at, status_code, error, duration_ms, status, next_at, lease_until)
  ), settled AS (
    UPDATE webhook_deliveries d SET status = CASE WHEN o.status <> 'delivered' AND d.next_at < d.lease_until THEN 'pending' ELSE o.status END,
      attempts = d.attempts + 1, next_at = CASE WHEN d.next_at < d.lease_until THEN d.next_at ELSE coalesce(o.next_at, d.next_at) END, lease_until = '-infinity'
    FROM o WHERE d.id = o.delivery_id AND d.lease_until = o.lease_until RETURNING d.id
  )
  INSERT INTO webhook_attempts (delivery_id, at, status_code, error, duration_ms)
  SELECT o.delivery_id, o.at, o.status_code, o.error, o.duration_ms FROM o JOIN settled ON settled.id = o.delivery_id
  RETURNING delivery_id`

/** Enabled subscriptions with due deliveries not leased: fewest leased now first, then earliest due (offers). */
const WAITING_SQL = `SELECT * FROM (SELECT w.id, w.url,
    CASE WHEN w.previous_secret IS NOT NULL AND w.previous_until > $1 THEN ARRAY[w.secret, w.previous_secret] ELSE ARRAY[w.secret] END AS secrets,
    (SELECT count(*)::int FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.lease_until > $1) AS leased,
    (SELECT min(d.next_at) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending' AND d.next_at <= $1 AND d.lease_until <= $1) AS due
  FROM webhooks w WHERE w.disabled_at IS NULL) s WHERE due IS NOT NULL ORDER BY leased, due, id`

type Query = <R extends pg.QueryResultRow>(text: string, values?: unknown[]) => Promise<pg.QueryResult<R>>

/** The store's WebhookStore: `read` runs reads on the pool, `transaction` work on one connection in one transaction (every write: its COMMIT checked). */
export function postgresWebhooks (read: <T>(work: (query: Query) => Promise<T>) => Promise<T>, transaction: <T>(work: (query: Query) => Promise<T>) => Promise<T>): WebhookStore {
  const withAttempts = async (query: Query, rows: DeliveryRow[]): Promise<Delivery[]> => {
    const { rows: attempts } = await query<AttemptRow>('SELECT delivery_id, at, status_code, error, duration_ms FROM webhook_attempts WHERE delivery_id = ANY($1::int8[]) ORDER BY at', [rows.map(row => row.id.toString())])
    return rows.map(row => rowToDelivery(row, attempts.filter(attempt => attempt.delivery_id === row.id)))
  }
  const get = async (query: Query, id: number): Promise<Subscription | undefined> => {
    const { rows } = await query<SubscriptionRow>(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhooks WHERE id = $1 AND ${NOT_BEING_DELETED}`, [id])
    return rows.length === 0 ? undefined : rowToSubscription(rows[0])
  }
  /** Makes subscription `id`'s changes in (cursor, end] deliveries due at `now` and moves its cursor to `end`; its row is locked already. */
  const deliverUpTo = async (query: Query, id: bigint | number, cursor: bigint, end: bigint, now: Date): Promise<number> => {
    const made = (await query(DELIVER_SQL, [id, cursor.toString(), end.toString(), now])).rowCount ?? 0
    await query('UPDATE webhooks SET cursor = $1 WHERE id = $2', [end.toString(), id])
    return made
  }
  /** Stores the outcomes' attempts and their deliveries' new state; per subscription, a success ends a run of failures, and a run of five days, or a 410, disables it. */
  const record = async (query: Query, outcomes: AttemptOutcome[]): Promise<void> => {
    if (outcomes.length === 0) return
    // Subscriptions before their deliveries, in id order, as enable and delete take them: no deadlock.
    await query('SELECT id FROM webhooks WHERE id = ANY($1::int8[]) ORDER BY id FOR NO KEY UPDATE', [[...new Set(outcomes.map(o => o.webhookId))]])
    const { rows } = await query<{ delivery_id: bigint }>(RECORD_SQL, [
      outcomes.map(o => o.deliveryId), outcomes.map(o => o.attempt.at), outcomes.map(o => o.attempt.statusCode ?? null), outcomes.map(o => o.attempt.error ?? null),
      outcomes.map(o => Math.round(o.attempt.durationMs)), outcomes.map(o => o.delivered ? 'delivered' : o.nextAt === undefined ? 'failed' : 'pending'), outcomes.map(o => o.nextAt ?? null),
      outcomes.map(o => o.leaseUntil)
    ])
    const settled = new Set(rows.map(row => Number(row.delivery_id)))
    for (const { webhookId, succeeded, failures } of streaksOf(outcomes.filter(o => settled.has(o.deliveryId)))) {
      if (succeeded) await query('UPDATE webhooks SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL', [webhookId])
      if (failures === undefined) continue
      await query('UPDATE webhooks SET failing_since = coalesce(failing_since, $1) WHERE id = $2', [failures.from, webhookId])
      const { rows: disabled } = await query<{ cursor: bigint }>(`UPDATE webhooks SET disabled_at = $1, disabled_reason = $2 WHERE id = $3 AND disabled_at IS NULL
        AND ($4 OR failing_since <= $1::timestamptz - make_interval(secs => $5::float8)) RETURNING cursor`,
      [failures.last, failures.disable ?? FAILING_REASON, webhookId, failures.disable !== undefined, FAILING_LIMIT_MS / 1000])
      if (disabled.length === 1) {
        const { rows: [log] } = await query<{ head: bigint }>('SELECT head FROM change_log')
        await deliverUpTo(query, webhookId, disabled[0].cursor, log.head, failures.last)
      }
    }
  }
  return {
    create: (subscription, now) => {
      // PostgreSQL's text cannot hold U+0000 (a URL with one is refused before: src/webhooks/addresses.ts).
      if (subscription.tag?.includes('\u0000') === true) return Promise.reject(new UnstorableTextError('The tag holds the character U+0000, which this store cannot keep; remove it.'))
      return transaction(async (query) => {
        const { rows } = await query<SubscriptionRow>(`INSERT INTO webhooks (url, events, tag, secret, cursor, created_at)
          SELECT $1, $2, $3, $4, head, $5 FROM change_log RETURNING ${SUBSCRIPTION_COLUMNS}`,
        [subscription.url, subscription.events.join(' '), subscription.tag ?? null, subscription.secret, now])
        return rowToSubscription(rows[0])
      })
    },
    list: () => read(async (query) => (await query<SubscriptionRow>(`SELECT ${SUBSCRIPTION_COLUMNS} FROM webhooks WHERE ${NOT_BEING_DELETED} ORDER BY id`)).rows.map(rowToSubscription)),
    get: (id) => read(query => get(query, id)),
    remove: (id) => removeInBatches(() => transaction(async (query) => {
      const { rowCount } = await query(`UPDATE webhooks SET disabled_at = coalesce(disabled_at, $2), disabled_reason = '${BEING_DELETED}' WHERE id = $1`, [id, new Date()])
      if (rowCount === 0) return false
      return (await query('DELETE FROM webhook_deliveries WHERE id IN (SELECT id FROM webhook_deliveries WHERE webhook_id = $1 ORDER BY id LIMIT $2)', [id, WEBHOOK_BATCH])).rowCount ?? 0
    }), () => transaction(async (query) => (await query('DELETE FROM webhooks WHERE id = $1', [id])).rowCount === 1)),
    beingDeleted: () => read(async (query) => (await query<{ id: bigint }>(`SELECT id FROM webhooks WHERE ${IS_BEING_DELETED} ORDER BY id`)).rows.map(row => Number(row.id))),
    rotate: (id, secret, previousUntil) => transaction(async (query) =>
      (await query(`UPDATE webhooks SET previous_secret = secret, previous_until = $1, secret = $2 WHERE id = $3 AND ${NOT_BEING_DELETED}`, [previousUntil, secret, id])).rowCount === 1),
    enable: (id, now) => transaction(async (query) => {
      // Only a disabled subscription moves: an enabled one keeps its cursor and its schedule.
      const { rowCount } = await query(`UPDATE webhooks SET disabled_at = NULL, disabled_reason = NULL, failing_since = NULL,
        cursor = greatest(cursor, (SELECT head FROM change_log)) WHERE id = $1 AND disabled_at IS NOT NULL AND ${NOT_BEING_DELETED}`, [id])
      // Those under an attempt now are left to its outcome: only a retry asked for brings them forward.
      if (rowCount === 1) await query("UPDATE webhook_deliveries SET next_at = least(next_at, $1) WHERE webhook_id = $2 AND status = 'pending' AND lease_until <= $1", [now, id])
      return await get(query, id)
    }),
    deliveries: (id, { status, after, limit }) => read(async (query) => {
      const { rows } = await query<DeliveryRow>(`SELECT ${DELIVERY_COLUMNS} FROM webhook_deliveries
        WHERE webhook_id = $1 AND id > $2 AND ($3::text IS NULL OR status = $3) ORDER BY id LIMIT $4`, [id, after ?? 0, status ?? null, limit])
      return await withAttempts(query, rows)
    }),
    retry: (id, deliveryId, now) => transaction(async (query) => {
      const { rows } = await query<DeliveryRow>(`UPDATE webhook_deliveries SET status = 'pending', next_at = $1 WHERE id = $2 AND webhook_id = $3
        AND webhook_id IN (SELECT id FROM webhooks WHERE ${NOT_BEING_DELETED}) RETURNING ${DELIVERY_COLUMNS}`, [now, deliveryId, id])
      return rows.length === 0 ? undefined : (await withAttempts(query, rows))[0]
    }),
    replay: async (id, after, now) => {
      const end = await read(async (query) => {
        const { rows } = await query<LogBounds & { cursor: bigint, disabled: boolean }>(`SELECT w.cursor, w.disabled_at IS NOT NULL AS disabled, l.head,
          coalesce((SELECT min(position) - 1 FROM changes), l.head) AS floor FROM webhooks w, change_log l WHERE w.id = $1 AND ${NOT_BEING_DELETED}`, [id])
        return rows.length === 0 ? 'not-found' : replayEnd(after, rows[0], rows[0])
      })
      return typeof end !== 'bigint' ? end : await replayInBatches(after, end, (from, to) => transaction(async (query) => (await query(DELIVER_SQL, [id, from.toString(), to.toString(), now])).rowCount ?? 0))
    },
    enqueue: (now, batch) => transaction(async (query) => {
      // Subscriptions another instance is making deliveries for are passed over: it makes them.
      const { rows } = await query<{ id: bigint, cursor: bigint, head: bigint }>(`SELECT w.id, w.cursor, l.head FROM webhooks w, change_log l
        WHERE w.disabled_at IS NULL AND w.cursor < l.head ORDER BY w.id FOR UPDATE OF w SKIP LOCKED`)
      let made = 0
      for (const { id, cursor, head } of rows) made += await deliverUpTo(query, id, cursor, cursor + BigInt(batch) < head ? cursor + BigInt(batch) : head, now)
      return made
    }),
    claim: (now, until, limits, settled = []) => transaction(async (query) => {
      await record(query, settled)
      const claimed: ClaimedDelivery[] = []
      const { rows: waiting } = await query<{ id: bigint, url: string, secrets: string[], leased: number }>(WAITING_SQL, [now])
      const plan = offers(waiting.map(subscription => subscription.leased), limits)
      let offer = plan.next()
      while (offer.done !== true) {
        const subscription = waiting[offer.value.index]
        const { rows } = await query<DeliveryRow>(CLAIM_SQL, [subscription.id, now, until, offer.value.limit])
        for (const row of rows) {
          claimed.push({ id: Number(row.id), webhookId: Number(row.webhook_id), position: row.position, type: row.type, plant: rowToPlant({ id: row.plant_id, name: row.name, tag: row.tag }), attempts: row.attempts, url: subscription.url, secrets: subscription.secrets, leaseUntil: until })
        }
        offer = plan.next(rows.length)
      }
      return claimed
    }),
    record: (outcomes) => transaction(query => record(query, outcomes)),
    resume: async () => 0, // instances share the deliveries: a lease held may be a live one's
    outlook: () => read(async (query) => {
      // Per subscription, the earliest due from its index: never a scan of every pending delivery.
      const { rows: [row] } = await query<{ head: bigint, subscriptions: number, behind: boolean, next_due: Date | null }>(`SELECT l.head,
          count(w.id)::int AS subscriptions, coalesce(bool_or(w.cursor < l.head), false) AS behind,
          min((SELECT min(d.next_at) FROM webhook_deliveries d WHERE d.webhook_id = w.id AND d.status = 'pending')) AS next_due
        FROM change_log l LEFT JOIN webhooks w ON w.disabled_at IS NULL GROUP BY l.head`)
      return { head: row.head, subscriptions: row.subscriptions, behind: row.behind, ...(row.next_due === null ? {} : { nextDue: row.next_due }) }
    }),
    backlog: (now) => read(async (query) => {
      const { rows } = await query<{ due: number, disabled: number }>(`SELECT
        (SELECT count(*)::int FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id AND w.disabled_at IS NULL WHERE d.status = 'pending' AND d.next_at <= $1) AS due,
        (SELECT count(*)::int FROM webhooks WHERE disabled_at IS NOT NULL AND ${NOT_BEING_DELETED}) AS disabled`, [now])
      return rows[0]
    }),
    prune: (before, batch) => transaction(async (query) =>
      // The status again outside: a row retried meanwhile is re-checked by the outer condition only.
      (await query(`DELETE FROM webhook_deliveries WHERE status <> 'pending' AND id IN (
        SELECT id FROM webhook_deliveries d WHERE status <> 'pending' AND created_at < $1
          AND NOT EXISTS (SELECT 1 FROM webhook_attempts a WHERE a.delivery_id = d.id AND a.at >= $1) ORDER BY id LIMIT $2)`, [before, batch])).rowCount ?? 0)
  }
}
