import cluster, { type Worker } from 'node:cluster'
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, type Registry } from 'prom-client'

/**
 * Under `--workers N`, node:cluster hands each scrape to whichever worker is next: one worker's
 * own counters would move back and forth between scrapes, which Prometheus reads as resets. So a
 * worker asks the primary, which asks every worker for its metrics and answers with their sum
 * (prom-client's aggregation). Workers forked by our primary say so in this variable; a worker of
 * any other cluster manager answers with its own metrics.
 */
export const FORKED_BY_PLANTSTORE = 'PLANTSTORE_WORKER'

/** A worker asks the primary for every worker's metrics, summed; the primary answers. */
const REQUEST = 'plantstore:metrics-request'
const ANSWER = 'plantstore:metrics-answer'
/** The primary asks each worker for its own metrics; each answers. */
const GATHER = 'plantstore:metrics-gather'
const GATHERED = 'plantstore:metrics-gathered'
/** How long the primary waits for every worker's own metrics. */
const GATHER_MS = 5000
/** How long a worker waits for the primary's answer: a little longer. */
const WAIT_MS = 6000

type Metrics = Array<MetricObjectWithValues<MetricValue<string>>>
interface Answer { type: typeof ANSWER, id: number, text?: string, error?: string }
interface Gathered { type: typeof GATHERED, id: number, metrics: Metrics }

/** In the primary: answers each worker's request with every live worker's metrics, summed. */
export function answerMetricsRequests (): void {
  let nextId = 0
  const gathering = new Map<number, (worker: Worker, metrics: Metrics) => void>()

  /**
   * Every connected worker's metrics, summed in the order of the workers' ids: floating-point sums
   * (a histogram's `_sum`, CPU seconds) then never go down between scrapes as they could if added
   * in the order the answers came (a + b + c and a + c + b can differ in the last bit).
   */
  const gather = async (): Promise<string> => {
    const workers = Object.values(cluster.workers ?? {}).filter((worker): worker is Worker => worker?.isConnected() === true).sort((a, b) => a.id - b.id)
    const id = nextId++
    const answers = new Map<number, Metrics>()
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        gathering.delete(id)
        reject(new Error(`${workers.length - answers.size} of ${workers.length} workers did not answer within ${GATHER_MS / 1000} s`))
      }, GATHER_MS)
      const settle = (): void => {
        if (answers.size < workers.length) return
        clearTimeout(timer)
        gathering.delete(id)
        resolve()
      }
      gathering.set(id, (worker, metrics) => {
        answers.set(worker.id, metrics)
        settle()
      })
      for (const worker of workers) worker.send({ type: GATHER, id })
      settle()
    })
    return await AggregatorRegistry.aggregate(workers.map(worker => answers.get(worker.id) ?? [])).metrics()
  }

  cluster.on('message', (worker, message: { type?: string, id?: number, metrics?: Metrics }) => {
    if (typeof message?.id !== 'number') return
    if (message.type === GATHERED) return gathering.get(message.id)?.(worker, message.metrics ?? [])
    if (message.type !== REQUEST) return
    const id = message.id
    gather().then(text => ({ text }), (error: Error) => ({ error: error.message })).then(answer => {
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
  let nextId = 0
  const pending = new Map<number, { resolve: (text: string) => void, reject: (error: Error) => void }>()
  process.on('message', (message: { type?: string, id?: number, text?: string, error?: string }) => {
    if (typeof message?.id !== 'number') return
    const id = message.id
    if (message.type === GATHER) {
      registry.getMetricsAsJSON().then(metrics => process.send?.({ type: GATHERED, id, metrics } satisfies Gathered), () => {})
    } else if (message.type === ANSWER) {
      const waiting = pending.get(id)
      pending.delete(id)
      if (message.text !== undefined) waiting?.resolve(message.text)
      else waiting?.reject(new Error(`the workers' metrics could not be gathered: ${message.error ?? 'no answer'}`))
    }
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
