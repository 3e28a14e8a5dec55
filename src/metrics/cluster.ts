import cluster from 'node:cluster'
import { AggregatorRegistry, type Registry } from 'prom-client'

/**
 * Under `--workers N`, node:cluster hands each scrape to whichever worker is next: one worker's
 * own counters would move back and forth between scrapes, which Prometheus reads as resets. So a
 * worker asks the primary, which asks every worker (prom-client's AggregatorRegistry) and answers
 * with their sum. Workers forked by our primary say so in this variable; a worker of any other
 * cluster manager answers with its own metrics.
 */
export const FORKED_BY_PLANTSTORE = 'PLANTSTORE_WORKER'

const REQUEST = 'plantstore:metrics-request'
const ANSWER = 'plantstore:metrics-answer'
/** prom-client's primary gives up on a worker's answer after 5 s; this waits a little longer. */
const WAIT_MS = 6000

interface Answer { type: typeof ANSWER, id: number, text?: string, error?: string }

/** In the primary: answers each worker's request with every live worker's metrics, summed. */
export function answerMetricsRequests (): void {
  const aggregator = new AggregatorRegistry()
  cluster.on('message', (worker, message: { type?: string, id?: number }) => {
    if (message?.type !== REQUEST || typeof message.id !== 'number') return
    const id = message.id
    aggregator.clusterMetrics().then(text => ({ text }), (error: Error) => ({ error: error.message })).then(answer => {
      if (worker.isConnected()) worker.send({ type: ANSWER, id, ...answer } satisfies Answer)
    }, () => {})
  })
}

/**
 * How the `/metrics` route reads `registry`: its own metrics, or, in a worker of our primary,
 * every worker's summed (`registry` is then what this worker contributes).
 */
export function metricsReader (registry: Registry): () => Promise<string> {
  if (!cluster.isWorker || process.env[FORKED_BY_PLANTSTORE] !== '1') return async () => await registry.metrics()
  AggregatorRegistry.setRegistries([registry])
  // The constructor is what makes this worker answer the primary's requests; the instance is not needed.
  new AggregatorRegistry() // eslint-disable-line no-new
  let nextId = 0
  const pending = new Map<number, { resolve: (text: string) => void, reject: (error: Error) => void }>()
  process.on('message', (message: Answer) => {
    if (message?.type !== ANSWER) return
    const waiting = pending.get(message.id)
    pending.delete(message.id)
    if (message.text !== undefined) waiting?.resolve(message.text)
    else waiting?.reject(new Error(`the workers' metrics could not be gathered: ${message.error ?? 'no answer'}`))
  })
  return async () => await new Promise<string>((resolve, reject) => {
    const id = nextId++
    const timer = setTimeout(() => {
      pending.delete(id)
      reject(new Error('the primary did not answer with the workers\' metrics'))
    }, WAIT_MS)
    pending.set(id, {
      resolve: text => { clearTimeout(timer); resolve(text) },
      reject: error => { clearTimeout(timer); reject(error) }
    })
    process.send?.({ type: REQUEST, id })
  })
}
