import type { FastifyReply, FastifyRequest } from 'fastify'
import { allowedMethods } from './contract.js'

/** What a preflight allows a browser to send beyond the simple headers. */
const ALLOW_HEADERS = 'Authorization, Content-Type, If-Match, If-None-Match, Last-Event-ID'
/** The headers of our answers a browser front end may read, beyond the simple ones. */
const EXPOSE_HEADERS = 'Allow, Changes-Position, ETag, Link, Retry-After, WWW-Authenticate'
/** How long, in seconds, a browser may reuse a preflight's answer. */
const MAX_AGE = '600'

export interface Cors {
  /** The CORS headers of any answer to a request from `origin` (its Origin header): `Vary: Origin` always, the allowance for a listed origin. */
  headersFor: (origin: string | undefined) => Readonly<Record<string, string>>
  /** Adds the CORS headers to `reply`, whatever it will answer: the first thing done with a request, and with every answer given before hooks run. */
  headers: (request: FastifyRequest, reply: FastifyReply) => void
  /** Answers a preflight from a listed origin on a path of the document (204, what it may send); false, doing nothing, for any other request. */
  answeredPreflight: (request: FastifyRequest, reply: FastifyReply) => boolean
}

/**
 * CORS for browser front ends on `origins`, matched exactly (scheme, host and port, as the
 * browser sends them in `Origin`); undefined when there are none: CORS off, nothing added to
 * any answer. With CORS on, every answer varies by Origin, so a cache never hands one origin's
 * answer to another. A preflight from any other origin, or on an unknown path, goes on as an
 * ordinary OPTIONS request (405 or 404), without CORS headers for a refused origin.
 */
export function corsFor (origins: readonly string[]): Cors | undefined {
  if (origins.length === 0) return undefined
  const elsewhere = Object.freeze({ vary: 'Origin' })
  const allowances = new Map(origins.map(origin => [origin, Object.freeze({ ...elsewhere, 'access-control-allow-origin': origin, 'access-control-expose-headers': EXPOSE_HEADERS })]))
  const headersFor = (origin: string | undefined): Readonly<Record<string, string>> => (origin === undefined ? undefined : allowances.get(origin)) ?? elsewhere
  const headers = (request: FastifyRequest, reply: FastifyReply): void => { reply.headers(headersFor(request.headers.origin)) }
  const answeredPreflight = (request: FastifyRequest, reply: FastifyReply): boolean => {
    const preflight = request.method === 'OPTIONS' && request.headers['access-control-request-method'] !== undefined &&
      allowances.has(request.headers.origin ?? '')
    const methods = preflight ? allowedMethods(request.url.split('?')[0]) : []
    if (methods.length === 0) return false
    reply.code(204).headers({
      'access-control-allow-methods': methods.join(', '),
      'access-control-allow-headers': ALLOW_HEADERS,
      'access-control-max-age': MAX_AGE
    }).send()
    return true
  }
  return { headersFor, headers, answeredPreflight }
}
