import type { FastifyInstance } from 'fastify'
import { StoreUnavailableError } from '../errors.js'
import type { Series } from './histogram.js'
import type { Metrics } from './metrics.js'

/** The route label of a request that matched no route (404, 405): one series, whatever paths are tried. */
export const UNMATCHED = 'unmatched'
/** The status label of a request whose client closed the connection before the answer was written (nginx's convention). */
export const CLIENT_CLOSED = 499

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
    reply.raw.once('close', () => {
      state.requestsInFlight--
      const status = reply.raw.writableFinished ? reply.raw.statusCode : CLIENT_CLOSED
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
