import { timingSafeEqual } from 'node:crypto'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ApiError } from './errors.js'
import type { Scope, Store, TokenRecord } from './store/store.js'
import { digestOf, looksLikeToken, TOKEN_CACHE_MS } from './tokens.js'

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

type Found = Awaited<ReturnType<Store['findToken']>>

/**
 * Recent token lookups, kept for TOKEN_CACHE_MS: a store read per request costs more than the
 * rest of the check. Revocation by the CLI waits that long before it returns, so a revoked
 * token is refused from the first request after `tokens revoke` has finished; expiry is
 * checked on every request.
 */
class TokenCache {
  private entries = new Map<string, { found: Found, at: number }>()

  async lookup (store: Store, digest: Buffer): Promise<Found> {
    const key = digest.toString('base64')
    const now = performance.now() // taken before the read, so an entry never outlives a change it missed
    const hit = this.entries.get(key)
    if (hit !== undefined && now - hit.at < TOKEN_CACHE_MS) return hit.found
    const found = await store.findToken(digest)
    if (found === undefined) return undefined // unknown tokens are not remembered: no memory for guessing
    if (this.entries.size >= 10_000) this.entries = new Map()
    this.entries.set(key, { found, at: now })
    return found
  }
}

/**
 * The token behind a request, or undefined for a missing, malformed, unknown, expired or
 * revoked one: the caller answers all of those alike, so the reply does not tell which.
 */
async function authenticate (store: Store, cache: TokenCache, request: FastifyRequest): Promise<TokenRecord | undefined> {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
  if (token === undefined || !looksLikeToken(token)) return undefined
  const digest = digestOf(token)
  // Found by its digest; the comparison that decides is constant-time all the same.
  const found = await cache.lookup(store, digest)
  if (found === undefined || !timingSafeEqual(found.digest, digest)) return undefined
  const { record } = found
  if (record.revokedAt !== undefined) return undefined
  if (record.expiresAt !== undefined && record.expiresAt.getTime() <= Date.now()) return undefined
  return record
}

/** Checks the bearer token and the route's scope before anything else runs. */
export function installAuth (app: FastifyInstance, store: Store): void {
  const cache = new TokenCache()
  app.addHook('onRequest', async (request) => {
    const scope = request.routeOptions.config.scope
    if (scope === undefined) return
    const token = await authenticate(store, cache, request)
    if (token === undefined) throw new ApiError('badToken')
    if (!token.scopes.includes(scope)) throw new ApiError('missingScope', `This token lacks the "${scope}" scope this operation needs.`)
    request.token = token
  })
}
