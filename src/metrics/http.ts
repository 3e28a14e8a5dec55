import type { FastifyReply, FastifyRequest, onErrorHookHandler } from 'fastify'
import type { Socket } from 'node:net'
import type { Logger } from 'pino'
import { StoreUnavailableError, type CountRefusal } from '../errors.js'
import type { Series } from './histogram.js'
import type { Metrics } from './metrics.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A route that only refuses (methods no other route of its path takes): counted and logged as no route, as the other methods' refusals are. */
    unrouted?: boolean
  }
}

/** The route label of a request that matched no route (404, 405): one series, whatever paths are tried. */
const UNMATCHED = 'unmatched'

/** The status label of a request whose client closed the connection before the answer was written (nginx's convention). */
const CLIENT_CLOSED = 499

/**
 * On a connection, its request routed and not yet answered: its id; the bytes the connection had
 * written when it began (a request begins once the answers before it are done, src/http-server.ts);
 * and the status Node answered it with and when, if it did (a 408 for a body too slow).
 */
const ROUTED = Symbol('plantstore.routed')
interface Routed { reqId: string, written: number, answeredBeforeRoute?: number, answeredAt?: number }
type Connection = Socket & { [ROUTED]?: Routed }

/**
 * Counts a refusal of Node's or Fastify's under plantstore_http_refused_before_routing_total,
 * unless the connection's request had been routed (its body too slow or malformed): then its
 * route's series shows the status it was answered with, not 499, and the answer is its id.
 */
export function refusalCounter (metrics: Metrics): CountRefusal {
  return (status, reason, socket) => {
    const routed = (socket as Connection | undefined)?.[ROUTED]
    if (routed !== undefined) {
      routed.answeredBeforeRoute = status
      // Its connection lingers after that answer (node-refusals.ts): the request's time ends here.
      routed.answeredAt = performance.now()
      return { reqId: routed.reqId }
    }
    metrics.refusedBeforeRouting.inc({ status: String(status), reason })
    return undefined
  }
}

/** What is recorded of a request once done, the same for every request of one method, route and status. */
interface Outcome {
  /** Its series in the metrics; none for the scrapes of `/metrics` themselves. */
  series?: Series<'method' | 'route' | 'status'>
  /** The logger that writes its line, with the method, route and status already in it; none below info. */
  log?: Logger
}

/**
 * What is kept of every request: in the metrics, its time and status by method, route template
 * (as the document writes it: `/plants/{id}`) and status, and the requests in flight (not the
 * scrapes of `/metrics` themselves); at `info`, one log line. Measured from routing to the
 * response's close, which also comes when the client leaves first (status 499, unless the answer's
 * head had gone out: a change stream that its client closes keeps its 200). What a request's
 * method, route and status share, its series and its logger's fixed fields, is made once and kept.
 * The returned function starts a request's record: the first thing done with every request.
 */
export function requestRecorder (metrics: Metrics, log: Logger): (request: FastifyRequest, reply: FastifyReply) => void {
  const { state } = metrics
  const logging = log.isLevelEnabled('info')
  // By method, then route, then status: lookups of the strings and numbers a request has already,
  // where one key per request would be a new string to build and hash (several times the cost).
  const known = new Map<string, Map<string | undefined, Map<number, Outcome>>>()
  const outcomeOf = (method: string, url: string | undefined, status: number): Outcome => {
    let routes = known.get(method)
    if (routes === undefined) known.set(method, routes = new Map())
    let statuses = routes.get(url)
    if (statuses === undefined) routes.set(url, statuses = new Map())
    let outcome = statuses.get(status)
    if (outcome === undefined) {
      // The route as the document writes it (`/plants/{id}`), in the metrics and the log alike.
      const route = url?.replace(/:(\w+)/g, '{$1}')
      outcome = {
        series: url === '/metrics' ? undefined : metrics.requests.series({ method, route: route ?? UNMATCHED, status: String(status) }),
        log: logging ? log.child({ method, route: route ?? null, status }) : undefined
      }
      statuses.set(status, outcome)
    }
    return outcome
  }

  return (request, reply) => {
    const { url: declared, config } = request.routeOptions
    const url = config.unrouted === true ? undefined : declared
    const counted = url !== '/metrics'
    if (!counted && !logging) return
    const start = performance.now()
    const connection: Connection = request.raw.socket
    const routed: Routed = { reqId: request.id, written: connection.bytesWritten }
    if (counted) {
      state.requestsInFlight++
      connection[ROUTED] = routed
    }
    reply.raw.on('close', () => {
      if (counted) {
        state.requestsInFlight--
        if (connection[ROUTED] === routed) connection[ROUTED] = undefined
      }
      // An answer whose head went out keeps its status (a change stream its client closed is a 200).
      // One made after its client had gone (a half-close, which Node takes as leaving) was never
      // written: Node drops it, though it calls it finished.
      const given = (reply.raw.writableFinished || reply.raw.headersSent) && connection.bytesWritten > routed.written
      const status = given ? reply.raw.statusCode : routed.answeredBeforeRoute ?? CLIENT_CLOSED
      const ms = (routed.answeredAt ?? performance.now()) - start
      const outcome = outcomeOf(request.method, url, status)
      outcome.series?.observe(ms / 1000)
      // Never a header, so never a token.
      outcome.log?.info({ reqId: request.id, durationMs: Math.round(ms * 100) / 100 }, 'request')
    })
  }
}

/** The onError hook, which only failures run: counts a 503 from the store, by why it refused. */
export function shedCounter (metrics: Metrics): onErrorHookHandler {
  return (_request, _reply, error, done) => {
    if (error instanceof StoreUnavailableError) metrics.shed.inc({ reason: error.reason })
    done()
  }
}
