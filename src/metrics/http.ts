import type { FastifyInstance } from 'fastify'
import type { Socket } from 'node:net'
import { StoreUnavailableError, type CountRefusal } from '../errors.js'
import type { Series } from './histogram.js'
import type { Metrics } from './metrics.js'

/** The route label of a request that matched no route (404, 405): one series, whatever paths are tried. */
const UNMATCHED = 'unmatched'
/** The status label of a request whose client closed the connection before the answer was written (nginx's convention). */
const CLIENT_CLOSED = 499

/** On a connection, its request routed and not yet answered: the status Node answered it with, if it did (a 408 for a body too slow). */
const ROUTED = Symbol('plantstore.routed')
interface Routed { answeredBeforeRoute?: number }
type Connection = Socket & { [ROUTED]?: Routed }

/**
 * Counts a refusal of Node's or Fastify's under plantstore_http_refused_before_routing_total,
 * unless the connection's request had been routed (its body too slow to arrive): then its
 * route's series shows the status it was answered with, not 499.
 */
export function refusalCounter (metrics: Metrics): CountRefusal {
  return (status, reason, socket) => {
    const routed = (socket as Connection | undefined)?.[ROUTED]
    if (routed !== undefined) routed.answeredBeforeRoute = status
    else metrics.refusedBeforeRouting.inc({ status: String(status), reason })
  }
}

/**
 * Times and counts every routed request but the scrapes of `/metrics` themselves, by method, route
 * template (as the document writes it: `/plants/{id}`) and status, and counts the requests in
 * flight. Measured from routing to the response's close, which also comes when the client
 * leaves first. The series of each method, route and status is looked up once, then kept.
 */
export function installRequestMetrics (app: FastifyInstance, metrics: Metrics): void {
  const { state } = metrics
  const known = new Map<string, Series<'method' | 'route' | 'status'>>()
  const seriesOf = (method: string, url: string | undefined, status: number): Series<'method' | 'route' | 'status'> => {
    const key = `${method} ${url ?? ''} ${status}`
    let series = known.get(key)
    if (series === undefined) {
      const route = url === undefined ? UNMATCHED : url.replace(/:(\w+)/g, '{$1}')
      series = metrics.requests.series({ method, route, status: String(status) })
      known.set(key, series)
    }
    return series
  }

  app.addHook('onRequest', (request, reply, done) => {
    const url = request.routeOptions.url
    if (url === '/metrics') return done()
    const start = performance.now()
    state.requestsInFlight++
    const connection: Connection = request.raw.socket
    const routed: Routed = {}
    connection[ROUTED] = routed
    reply.raw.once('close', () => {
      state.requestsInFlight--
      if (connection[ROUTED] === routed) connection[ROUTED] = undefined
      const status = reply.raw.writableFinished ? reply.raw.statusCode : routed.answeredBeforeRoute ?? CLIENT_CLOSED
      seriesOf(request.method, url, status).observe((performance.now() - start) / 1000)
    })
    done()
  })

  // Only failures run this hook: a 503 from the store, by why it refused.
  app.addHook('onError', (_request, _reply, error, done) => {
    if (error instanceof StoreUnavailableError) metrics.shed.inc({ reason: error.reason })
    done()
  })
}
