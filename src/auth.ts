import { timingSafeEqual } from 'node:crypto'
import type { FastifyInstance } from 'fastify'
import { ApiError } from './errors.js'
import type { Scope, Store, TokenRecord } from './store/store.js'
import { TokenCache, type Found } from './token-cache.js'
import { digestOf, looksLikeToken } from './tokens.js'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The scope a route needs; routes without one (health, docs) need no token. */
    scope?: Scope
  }
  interface FastifyRequest {
    token?: TokenRecord
  }
}

const BEARER = /^Bearer +(\S+) *$/i

/**
 * The token behind a lookup if it may make a request that needs `scope`. A missing, malformed,
 * unknown, expired or revoked token is one failure, so the reply does not tell which.
 */
function authorize (found: Found, digest: Buffer, scope: Scope): TokenRecord {
  // Found by its digest; the comparison that decides is constant-time all the same.
  if (found === undefined || !timingSafeEqual(found.digest, digest)) throw new ApiError('badToken')
  const { record } = found
  if (record.revokedAt !== undefined) throw new ApiError('badToken')
  if (record.expiresAt !== undefined && record.expiresAt.getTime() <= Date.now()) throw new ApiError('badToken')
  if (!record.scopes.includes(scope)) throw new ApiError('missingScope', `This token lacks the "${scope}" scope this operation needs.`)
  return record
}

/**
 * Checks the bearer token and the route's scope before anything else runs. A callback hook,
 * not an async one: with the lookup cached it finishes in the same tick, with no promise per
 * request on the hottest path.
 */
export function installAuth (app: FastifyInstance, store: Store): void {
  const cache = new TokenCache(store)
  app.addHook('onRequest', (request, _reply, done) => {
    const scope = request.routeOptions.config.scope
    if (scope === undefined) return done()
    const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
    if (token === undefined || !looksLikeToken(token)) return done(new ApiError('badToken'))
    const digest = digestOf(token)
    const finish = (found: Found): void => {
      try {
        request.token = authorize(found, digest, scope)
      } catch (error) {
        return done(error as ApiError)
      }
      done()
    }
    const found = cache.lookup(digest)
    if (found instanceof Promise) found.then(finish, done)
    else finish(found)
  })
}
