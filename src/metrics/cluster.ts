import cluster from 'node:cluster'
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
/** A worker tells the primary it answers GATHER: asked before, it would not hear. */
const READY = 'plantstore:metrics-ready'
/** The primary asks each worker for its own metrics; each answers. */
const GATHER = 'plantstore:metrics-gather'
const GATHERED = 'plantstore:metrics-gathered'
/** How long the primary waits for every worker's own metrics. */
const GATHER_MS = 5000
/** How long a worker waits for the primary's answer: a little longer. */
const WAIT_MS = 6000

type Metrics = Array<MetricObjectWithValues<MetricValue<string>>>
interface Message { type?: string, id?: number, text?: string, error?: string, metrics?: Metrics }

/**
 * The workers' metrics summed, in the order of the workers' ids: floating-point sums (a
 * histogram's `_sum`, CPU seconds) then never go down between scrapes, as they could if added in
 * the order the answers came (0.1 + 0.2 + 0.3 and 0.3 + 0.2 + 0.1 differ in the last digit).
 */
export async function summedInOrder (byWorker: ReadonlyMap<number, Metrics>): Promise<string> {
  const ids = [...byWorker.keys()].sort((a, b) => a - b)
  return await AggregatorRegistry.aggregate(ids.map(id => byWorker.get(id) ?? [])).metrics()
}

/** One gathering of every ready worker's metrics: settled once each has answered or gone. */
interface Gathering { waitingFor: Set<number>, answers: Map<number, Metrics>, settle: (error?: Error) => void }

/** In the primary: answers each worker's request with every ready worker's metrics, summed. */
export function answerMetricsRequests (): void {
  let nextId = 0
  const ready = new Set<number>()
  const gatherings = new Map<number, Gathering>()

  const gather = async (): Promise<string> => {
    const id = nextId++
    const answers = new Map<number, Metrics>()
    const waitingFor = new Set([...ready].filter(workerId => cluster.workers?.[workerId]?.isConnected() === true))
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => { settle(new Error(`${waitingFor.size} of the workers did not answer within ${GATHER_MS / 1000} s`)) }, GATHER_MS)
      const settle = (error?: Error): void => {
        if (error === undefined && waitingFor.size > 0) return
        clearTimeout(timer)
        gatherings.delete(id)
        if (error === undefined) resolve()
        else reject(error)
      }
      gatherings.set(id, { waitingFor, answers, settle })
      for (const workerId of waitingFor) cluster.workers?.[workerId]?.send({ type: GATHER, id }, () => {})
      settle()
    })
    return await summedInOrder(answers)
  }

  cluster.on('message', (worker, message: Message) => {
    if (message?.type === READY) {
      ready.add(worker.id)
      return
    }
    if (typeof message?.id !== 'number') return
    if (message.type === GATHERED) {
      const gathering = gatherings.get(message.id)
      if (gathering === undefined) return
      if (message.error !== undefined) return gathering.settle(new Error(`a worker could not read its metrics: ${message.error}`))
      gathering.answers.set(worker.id, message.metrics ?? [])
      gathering.waitingFor.delete(worker.id)
      return gathering.settle()
    }
    if (message.type !== REQUEST) return
    const id = message.id
    gather().then(text => ({ text }), (error: Error) => ({ error: error.message })).then(answer => {
      if (worker.isConnected()) worker.send({ type: ANSWER, id, ...answer }, () => {})
    }, () => {})
  })
  // A worker gone is summed no more: a gathering under way settles without it.
  cluster.on('exit', (worker) => {
    ready.delete(worker.id)
    for (const gathering of gatherings.values()) {
      gathering.waitingFor.delete(worker.id)
      gathering.settle()
    }
  })
}

/** Sends `message` to the primary, if the channel is still open (it closes as the process stops). */
function toPrimary (message: Message): void {
  if (process.connected) process.send?.(message, undefined, {}, () => {})
}

/**
 * How the `/metrics` route reads `registry`: its own metrics, or, in a worker of our primary,
 * every worker's summed (`registry` is then what this worker contributes).
 */
export function metricsReader (registry: Registry): () => Promise<string> {
  if (!cluster.isWorker || process.env[FORKED_BY_PLANTSTORE] !== '1') return async () => await registry.metrics()
  let nextId = 0
  const pending = new Map<number, { resolve: (text: string) => void, reject: (error: Error) => void }>()
  process.on('message', (message: Message) => {
    if (typeof message?.id !== 'number') return
    const id = message.id
    if (message.type === GATHER) {
      registry.getMetricsAsJSON().then(metrics => { toPrimary({ type: GATHERED, id, metrics }) }, (error: Error) => { toPrimary({ type: GATHERED, id, error: error.message }) })
    } else if (message.type === ANSWER) {
      const waiting = pending.get(id)
      pending.delete(id)
      if (message.text !== undefined) waiting?.resolve(message.text)
      else waiting?.reject(new Error(`the workers' metrics could not be gathered: ${message.error ?? 'no answer'}`))
    }
  })
  toPrimary({ type: READY })
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
    toPrimary({ type: REQUEST, id })
  })
}
