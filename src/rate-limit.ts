import type { onRequestHookHandler } from 'fastify'
import { ApiError } from './errors.js'

const WINDOW_MS = 60_000

/**
 * At most `perMinute` requests per token in each fixed one-minute window; over it, 429 with
 * Retry-After. Counts live in this process (with several instances, each counts its own).
 * The hook runs after auth, on the routes that take a token (installAuth adds it); none when
 * `perMinute` is 0.
 */
export function rateLimiter (perMinute: number): onRequestHookHandler | undefined {
  if (perMinute === 0) return undefined
  let windowStart = 0
  let counts = new Map<number, number>()
  // A callback hook, like auth's: counting needs no promise per request.
  const limit: onRequestHookHandler = (request, _reply, done) => {
    if (request.token === undefined) return done()
    const now = Date.now()
    if (now - windowStart >= WINDOW_MS) {
      windowStart = now - (now % WINDOW_MS)
      counts = new Map()
    }
    const count = (counts.get(request.token.id) ?? 0) + 1
    counts.set(request.token.id, count)
    if (count <= perMinute) return done()
    const retryAfter = Math.ceil((windowStart + WINDOW_MS - now) / 1000)
    done(new ApiError('rateLimited', undefined, { 'retry-after': String(retryAfter) }))
  }
  return limit
}
