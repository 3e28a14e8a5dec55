import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client'
import type { UnavailableReason } from '../errors.js'
import { CHANGE_TYPES, type ChangeType, type LogBounds } from '../store/store.js'
import { HotHistogram } from './histogram.js'

/** Latencies, in seconds: from a quarter of a millisecond (a read in a batch) past the 2 s store deadline. */
const SECONDS = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
/** Writes per group commit: from one to the cap of 1024 writes in flight. */
const WRITES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]

/** The store operations that are timed: every method of Store but close. */
export const STORE_OPERATIONS = ['create', 'get', 'list', 'replace', 'remove', 'changes', 'logBounds', 'pruneChanges', 'createToken', 'createFirstToken', 'findToken', 'listTokens', 'revokeToken', 'ping'] as const
export type StoreOperation = typeof STORE_OPERATIONS[number]

/** How a store call failed: the reasons of StoreUnavailableError, text the store cannot keep (400), or a bug (500). */
export type StoreErrorKind = UnavailableReason | 'refused' | 'internal'

export type Metrics = ReturnType<typeof createMetrics>

let processMetrics: Registry | undefined
/** The process's metrics, collected once per process however many apps it builds (tests build many): their collectors never stop. */
function processRegistry (): Registry {
  if (processMetrics === undefined) {
    processMetrics = new Registry()
    collectDefaultMetrics({ register: processMetrics })
  }
  return processMetrics
}

/** A gauge read from the store, which every worker shares: under WORKERS, one reading, not their sum. */
const READ_FROM_THE_STORE = { aggregator: 'max' } as const

/**
 * The service's metrics on a registry of its own (not prom-client's global one), with the
 * process metrics prom-client collects (`process_*`, `nodejs_*`, under their usual names).
 * What the hot path updates is plain numbers and Series; the registry reads them when scraped.
 */
export function createMetrics () {
  const own = new Registry()
  const registers = [own]
  const state = {
    requestsInFlight: 0,
    /** Requests read and waiting for the answer before theirs on their connection (src/http-server.ts counts them). */
    pipelined: { waiting: 0 },
    storeInFlight: Object.fromEntries(STORE_OPERATIONS.map(operation => [operation, 0])) as Record<StoreOperation, number>,
    /** The change feed's readers, and where the log stands (set once the app has its feed and store). */
    changes: {
      open: { streams: 0, polls: 0 },
      written: Object.fromEntries(CHANGE_TYPES.map(type => [type, 0])) as Record<ChangeType, number>,
      bounds: undefined as (() => Promise<LogBounds>) | undefined
    },
    /** The webhook dispatcher's attempts in flight, and the store's backlog (set once the app has them). */
    webhooks: {
      attempts: () => 0,
      backlog: undefined as (() => Promise<{ due: number, disabled: number }>) | undefined
    }
  }

  const requests = new HotHistogram({
    name: 'plantstore_http_request_duration_seconds',
    help: 'Time from a request\'s routing to the end of its answer, by method, route template (unmatched: no route) and status (499: the client left before the answer\'s head went out).',
    labelNames: ['method', 'route', 'status'],
    buckets: SECONDS,
    registers
  })
  const storeOperations = new HotHistogram({
    name: 'plantstore_store_operation_duration_seconds',
    help: 'Time from a store call to its answer, by operation, failures included.',
    labelNames: ['operation'],
    buckets: SECONDS,
    registers
  })
  const groupCommits = new HotHistogram({
    name: 'plantstore_store_group_commit_writes',
    help: 'Writes per commit of the SQLite store (the writes of one event-loop turn: one transaction, one fdatasync). None on PostgreSQL.',
    buckets: WRITES,
    registers
  })

  const webhookAttempts = new HotHistogram({
    name: 'plantstore_webhook_attempt_duration_seconds',
    help: 'Time from a webhook attempt\'s request to the receiver\'s answer or the failure, by outcome.',
    labelNames: ['outcome'],
    buckets: SECONDS,
    registers
  })

  const metrics = {
    state,
    webhookAttempts,
    requests,
    storeOperations,
    groupCommits,
    requestsTotal: new Counter({
      name: 'plantstore_http_requests_total',
      help: 'Requests answered, by method, route template and status; the count of the duration histogram.',
      labelNames: ['method', 'route', 'status'],
      registers,
      collect () {
        this.reset()
        for (const series of requests.each()) this.inc(series.labels, series.count)
      }
    }),
    requestsInFlight: new Gauge({
      name: 'plantstore_http_requests_in_flight',
      help: 'Requests routed and not yet answered.',
      registers,
      collect () { this.set(state.requestsInFlight) }
    }),
    requestsWaiting: new Gauge({
      name: 'plantstore_http_requests_waiting',
      help: 'Requests read and waiting for the answer before theirs on their connection (pipelined); past 8,192, a connection that pipelines deeper than 8 is closed.',
      registers,
      collect () { this.set(state.pipelined.waiting) }
    }),
    shed: new Counter({
      name: 'plantstore_http_shed_requests_total',
      help: 'Requests answered 503 by the store, by reason: capacity (its cap of work in flight), deadline (about 2 s), unavailable (storage out of reach).',
      labelNames: ['reason'],
      registers
    }),
    refusedBeforeRouting: new Counter({
      name: 'plantstore_http_refused_before_routing_total',
      help: 'Requests answered before routing (not in plantstore_http_requests_total), by status and reason: malformed HTTP, headers too large, too slow to arrive (408), an unroutable path, an Expect other than 100-continue.',
      labelNames: ['status', 'reason'],
      registers
    }),
    storeErrors: new Counter({
      name: 'plantstore_store_errors_total',
      help: 'Store calls that failed, by operation and kind: capacity, deadline, unavailable (answered 503), refused (text the store cannot keep, 400), internal (a bug, 500).',
      labelNames: ['operation', 'kind'],
      registers
    }),
    storeInFlight: new Gauge({
      name: 'plantstore_store_operations_in_flight',
      help: 'Store calls made and not yet answered, by operation.',
      labelNames: ['operation'],
      registers,
      collect () {
        for (const operation of STORE_OPERATIONS) this.set({ operation }, state.storeInFlight[operation])
      }
    }),
    changeLog: new Gauge({
      name: 'plantstore_changes_position',
      help: 'The change log\'s head (the last position written, by any instance) and the oldest position it keeps (older ones answer 410), read from the store when scraped.',
      labelNames: ['end'],
      registers,
      ...READ_FROM_THE_STORE,
      async collect () {
        const bounds = await state.changes.bounds?.().catch(() => undefined) // unreadable now: the last values stay
        if (bounds === undefined) return
        this.set({ end: 'head' }, Number(bounds.head))
        this.set({ end: 'oldest' }, Number(bounds.floor + 1n))
      }
    }),
    changesWritten: new Counter({
      name: 'plantstore_changes_written_total',
      help: 'Changes this process wrote to the change log, by type.',
      labelNames: ['type'],
      registers,
      collect () {
        this.reset()
        for (const type of CHANGE_TYPES) this.inc({ type }, state.changes.written[type])
      }
    }),
    webhookAttemptsTotal: new Counter({
      name: 'plantstore_webhook_attempts_total',
      help: 'Webhook attempts this process made, by outcome: delivered (a 2xx), retrying (failed, another attempt scheduled), failed (the last attempt failed); the count of the duration histogram.',
      labelNames: ['outcome'],
      registers,
      collect () {
        this.reset()
        for (const series of webhookAttempts.each()) this.inc(series.labels, series.count)
      }
    }),
    webhookAttemptsInFlight: new Gauge({
      name: 'plantstore_webhook_attempts_in_flight',
      help: 'Webhook attempts this process has under way; capped by WEBHOOKS_MAX_IN_FLIGHT.',
      registers,
      collect () { this.set(state.webhooks.attempts()) }
    }),
    webhookDue: new Gauge({
      name: 'plantstore_webhook_deliveries_due',
      help: 'Webhook deliveries due now and not yet attempted (the backlog), of enabled subscriptions, read from the store when scraped.',
      registers,
      ...READ_FROM_THE_STORE,
      async collect () {
        const backlog = await state.webhooks.backlog?.().catch(() => undefined)
        if (backlog !== undefined) this.set(backlog.due)
      }
    }),
    webhooksDisabled: new Gauge({
      name: 'plantstore_webhooks_disabled',
      help: 'Webhook subscriptions disabled (a 410 from the receiver, or five days of failures), read from the store when scraped.',
      registers,
      ...READ_FROM_THE_STORE,
      async collect () {
        const backlog = await state.webhooks.backlog?.().catch(() => undefined)
        if (backlog !== undefined) this.set(backlog.disabled)
      }
    }),
    changeReaders: new Gauge({
      name: 'plantstore_changes_readers',
      help: 'Readers of the change feed: Server-Sent Events streams open, and long polls waiting; together capped by CHANGES_MAX_READERS.',
      labelNames: ['kind'],
      registers,
      collect () {
        this.set({ kind: 'stream' }, state.changes.open.streams)
        this.set({ kind: 'poll' }, state.changes.open.polls)
      }
    })
  }
  // Merged once all are registered: merge copies the metrics registered so far.
  return { registry: Registry.merge([processRegistry(), own]), ...metrics }
}
