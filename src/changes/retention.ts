import type { Logger } from 'pino'
import type { Store } from '../store/store.js'
import { DELIVERY_LOG_MS } from '../store/webhooks.js'

/** Changes dropped per statement: each batch is a short transaction, so writes never wait long behind a prune. */
export const PRUNE_BATCH = 1000

/** How often the log is pruned: a tenth of the retention, between a tenth of a second and a minute. */
export function pruneIntervalMs (retentionMs: number): number {
  return Math.min(60_000, Math.max(100, retentionMs / 10))
}

/**
 * Drops the changes older than `retentionMs` (but never one an enabled webhook subscription has
 * not yet made a delivery of, nor any from its oldest delivery still pending on), and the webhook
 * deliveries settled longer ago than the delivery log keeps them, a batch at a time, now and then
 * every pruneIntervalMs, until stopped. Every instance prunes (PostgreSQL): a batch another
 * already dropped drops nothing. A store out of reach is tried again at the next interval, with
 * one warn line.
 */
export function startPruning ({ store, retentionMs, log }: { store: Store, retentionMs: number, log: Logger }): { stop: () => Promise<void> } {
  let stopped = false
  const isStopped = (): boolean => stopped
  let failing = false
  let running: Promise<void> = Promise.resolve()
  const prune = async (): Promise<void> => {
    const inBatches = async (drop: (batch: number) => Promise<number>): Promise<void> => {
      for (let dropped = PRUNE_BATCH; dropped === PRUNE_BATCH && !isStopped();) {
        dropped = await drop(PRUNE_BATCH)
        await new Promise(resolve => setImmediate(resolve)) // requests go between batches
      }
    }
    try {
      const before = new Date(Date.now() - retentionMs)
      await inBatches(batch => store.pruneChanges(before, batch))
      const settledBefore = new Date(Date.now() - DELIVERY_LOG_MS)
      await inBatches(batch => store.webhooks.prune(settledBefore, batch))
      failing = false
    } catch (error) {
      if (!failing) log.warn({ cause: (error as Error).message }, 'change log: pruning failed; trying again later')
      failing = true
    }
  }
  const timer = setInterval(() => { running = running.then(prune) }, pruneIntervalMs(retentionMs))
  timer.unref()
  running = prune()
  return {
    stop: async () => {
      stopped = true
      clearInterval(timer)
      await running
    }
  }
}
