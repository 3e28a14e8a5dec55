import type { Store } from './store/store.js'
import { TOKEN_CACHE_MS } from './tokens.js'

export type Found = Awaited<ReturnType<Store['findToken']>>

const CAPACITY = 10_000

/**
 * Recent token lookups, kept for TOKEN_CACHE_MS: a store read per request costs more than the
 * rest of the check. Revocation by the CLI waits that long before it returns, so a revoked
 * token is refused from the first request after `tokens revoke` has finished; expiry is
 * checked by the caller on every request. Unknown tokens are not remembered: no memory spent
 * on guessing. When full, the oldest entry makes room.
 */
export class TokenCache {
  private readonly entries = new Map<string, { found: Found, at: number }>()

  constructor (private readonly store: Store) {}

  /** The lookup if a fresh one is kept, else a promise of it: the usual case stays synchronous. */
  lookup (digest: Buffer, now = performance.now()): Found | Promise<Found> {
    const key = digest.toString('base64')
    const entry = this.entries.get(key)
    if (entry !== undefined && now - entry.at < TOKEN_CACHE_MS) return entry.found
    this.entries.delete(key) // stale or absent; re-inserted last, so evicted last
    // `now` was taken before the read, so an entry never outlives a change the read missed.
    return this.store.findToken(digest).then(found => {
      if (found === undefined) return undefined
      if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value as string)
      this.entries.set(key, { found, at: now })
      return found
    })
  }
}
