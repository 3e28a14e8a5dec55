import { timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError } from './errors.js'
import type { Scope, Store, TokenRecord } from './store/store.js'
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
 * The token behind a request, or undefined for a missing, malformed, unknown, expired or
 * revoked one: the caller answers all of those alike, so the reply does not tell which.
 */
async function authenticate (store: Store, request: FastifyRequest): Promise<TokenRecord | undefined> {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
  if (token === undefined || !looksLikeToken(token)) return undefined
  const digest = digestOf(token)
  // Found by its digest; the comparison that decides is constant-time all the same.
  const found = await store.findToken(digest)
  if (found === undefined || !timingSafeEqual(found.digest, digest)) return undefined
  const { record } = found
  if (record.revokedAt !== undefined) return undefined
  if (record.expiresAt !== undefined && record.expiresAt.getTime() <= Date.now()) return undefined
  return record
}

/** Checks the bearer token and the route's scope before anything else runs. */
export function installAuth (app: FastifyInstance, store: Store): void {
  app.addHook('onRequest', async (request) => {
    const scope = request.routeOptions.config.scope
    if (scope === undefined) return
    const token = await authenticate(store, request)
    if (token === undefined) throw new ApiError('badToken')
    if (!token.scopes.includes(scope)) throw new ApiError('missingScope', `This token lacks the "${scope}" scope this operation needs.`)
    request.token = token
  })
}
