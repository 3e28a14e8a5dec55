import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { ApiError } from './errors.js'

/** How many times the request carries `Authorization`: Node keeps only the first, so count the raw list. */
function authorizationCount (request: FastifyRequest): number {
  const raw = request.raw.rawHeaders
  let count = 0
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i].length === 13 && raw[i].toLowerCase() === 'authorization') count++
  }
  return count
}

/** True when the request declares no body: no Transfer-Encoding and no or a zero Content-Length. */
function hasNoBody (request: FastifyRequest): boolean {
  const length = request.headers['content-length']
  return request.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')
}

/**
 * Checks on the request's head that come before everything else, auth included: HTTP/1.1
 * requires Host; a second Authorization header is ambiguous (which token is meant?), so it is
 * refused rather than settled by taking the first. A DELETE without a body has its content type
 * ignored, so `DELETE` with a stray `Content-Type: application/json` is an ordinary DELETE.
 */
export function installEdgeChecks (app: FastifyInstance, log: Logger): void {
  app.addHook('onRequest', (request, _reply, done) => {
    if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
      log.warn({ reqId: request.id, status: 400, reason: 'missingHost' }, 'request refused before routing')
      return done(new ApiError('missingHost'))
    }
    if (authorizationCount(request) > 1) return done(new ApiError('repeatedAuthorization'))
    // Of the operations, only DELETE could be handed a body parser without a body (Fastify reads none for GET).
    if (request.method === 'DELETE' && request.headers['content-type'] !== undefined && hasNoBody(request)) {
      delete request.headers['content-type']
    }
    done()
  })
}
