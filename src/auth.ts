import type { FastifyInstance, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify'
import { ApiError } from './errors.js'
import type { Scope, Store, TokenRecord } from './store/store.js'
import { TokenCache } from './token-cache.js'
import { looksLikeToken } from './tokens.js'

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

/** The request's bearer token, or undefined when the header is missing or cannot hold one. */
function tokenOf (request: FastifyRequest): string | undefined {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
  return token !== undefined && looksLikeToken(token) ? token : undefined
}

/**
 * Why a token's record may not make a request that needs `scope`, or undefined when it may. A
 * missing, malformed, unknown, expired or revoked token is one failure, so the reply does not
 * tell which.
 */
function refusalOf (record: TokenRecord | undefined, scope: Scope): ApiError | undefined {
  if (record === undefined || record.revokedAt !== undefined) return new ApiError('badToken')
  if (record.expiresAt !== undefined && record.expiresAt.getTime() <= Date.now()) return new ApiError('badToken')
  if (!record.scopes.includes(scope)) {
    return new ApiError('missingScope', `This token lacks the "${scope}" scope this operation needs.`, { 'www-authenticate': `Bearer error="insufficient_scope", scope="${scope}"` })
  }
  return undefined
}

/** Lets the request go on with its token's record, or answers it with the refusal. */
function admit (request: FastifyRequest, record: TokenRecord | undefined, scope: Scope, done: HookHandlerDoneFunction): void {
  const refusal = refusalOf(record, scope)
  if (refusal === undefined) request.token = record
  done(refusal)
}

/**
 * Checks the bearer token and the route's scope before anything else of the route runs. The hook
 * is added to each route that needs a scope when the route is declared, so routes without one
 * (health, the document) carry no auth work at all, and the scope is known without looking it
 * up per request. A callback hook, not an async one: with the check cached it finishes in the
 * same tick, with no promise per request on the hottest path. `after` are hooks that need the
 * checked token (the rate limit): they run right after it, on the same routes.
 */
export function installAuth (app: FastifyInstance, store: Store, after: onRequestHookHandler[] = []): StillAllowed {
  const cache = new TokenCache(store)
  const requireScope = (scope: Scope): onRequestHookHandler => (request, _reply, done) => {
    const token = tokenOf(request)
    if (token === undefined) return done(new ApiError('badToken'))
    const checked = cache.check(token)
    if (checked instanceof Promise) checked.then(record => { admit(request, record, scope, done) }, done)
    else admit(request, checked, scope, done)
  }
  app.addHook('onRoute', (route) => {
    const scope = route.config?.scope
    if (scope === undefined) return
    const own = route.onRequest === undefined ? [] : [route.onRequest].flat()
    route.onRequest = [requireScope(scope), ...after, ...own]
  })
  return async (request, scope) => {
    const token = tokenOf(request)
    return token !== undefined && refusalOf(await cache.check(token), scope) === undefined
  }
}

/**
 * Whether the token a request was admitted with would still be: a long answer (a change
 * stream) asks again as it goes, so that a revoked or expired token stops receiving. Throws when
 * the store cannot tell.
 */
export type StillAllowed = (request: FastifyRequest, scope: Scope) => Promise<boolean>
