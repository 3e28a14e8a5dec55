import { timingSafeEqual } from 'node:crypto'
import type { Store, TokenRecord } from './store/store.js'
import { digestOf, TOKEN_CACHE_MS } from './tokens.js'

const CAPACITY = 10_000

interface Entry { record: TokenRecord, at: number }

/**
 * Recent token checks, kept for TOKEN_CACHE_MS and keyed by the token as presented (it is in
 * memory with the request anyway), so that a token seen within the last second costs neither
 * a hash nor a store read. A hit is decided by the map's own comparison of the presented string
 * with the remembered one; comparing the two again could not fail, so there is no second compare.
 * A miss asks the store by SHA-256 digest, so what its lookup's timing depends on is a digest,
 * never the token. Revocation by the CLI waits TOKEN_CACHE_MS before it returns, so a revoked
 * token is refused from the first request after `tokens revoke` has finished; expiry is checked
 * by the caller on every request. Unknown tokens are not remembered: no memory spent on
 * guessing. When full, the oldest entry makes room.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>()

  constructor (private readonly store: Store) {}

  /** The stored token that `token` is, or undefined: from memory if checked within TOKEN_CACHE_MS, else a promise of the store's answer. */
  check (token: string, now = performance.now()): TokenRecord | undefined | Promise<TokenRecord | undefined> {
    const entry = this.entries.get(token)
    if (entry !== undefined && now - entry.at < TOKEN_CACHE_MS) return entry.record
    this.entries.delete(token) // stale or absent; re-inserted last, so evicted last
    // `now` was taken before the read, so an entry never outlives a change the read missed.
    const digest = digestOf(token)
    return this.store.findToken(digest).then(found => {
      // The store's answer counts only for this digest (a store that answered another is not trusted).
      if (found === undefined || !timingSafeEqual(found.digest, digest)) return undefined
      if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value as string)
      this.entries.set(token, { record: found.record, at: now })
      return found.record
    })
  }
}
