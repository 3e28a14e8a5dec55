import { timingSafeEqual } from 'node:crypto'
import type { Store, TokenRecord } from './store/store.js'
import { digestOf, TOKEN_CACHE_MS } from './tokens.js'

const CAPACITY = 10_000

interface Entry { record: TokenRecord, at: number }
interface Lookup { answer: Promise<TokenRecord | undefined>, at: number }

/**
 * Recent token checks, kept for TOKEN_CACHE_MS and keyed by the token as presented (it is in
 * memory with the request anyway), so that a token seen within the last second costs neither
 * a hash nor a store read. A hit is decided by the map's own comparison of the presented string
 * with the remembered one; comparing the two again could not fail, so there is no second compare.
 * A miss asks the store by SHA-256 digest, so what its lookup's timing depends on is a digest,
 * never the token. Revocation by the CLI waits TOKEN_CACHE_MS before it returns, so a revoked
 * token is refused from the first request after `tokens revoke` has finished; expiry is checked
 * by the caller on every request. Unknown tokens are not remembered: no memory spent on
 * guessing. When full, the oldest entry makes room. The requests that present one token while
 * its read is under way share that read (each would otherwise hash and read alike: every
 * request in flight when an entry lapses), under the same rule as an entry: only within
 * TOKEN_CACHE_MS of its start.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>()
  /** Reads under way, by token: kept apart from the entries, so that guesses never evict them. */
  private readonly lookups = new Map<string, Lookup>()

  constructor (private readonly store: Store) {}

  /** The stored token that `token` is, or undefined: from memory if checked within TOKEN_CACHE_MS, else a promise of the store's answer. */
  check (token: string, now = performance.now()): TokenRecord | undefined | Promise<TokenRecord | undefined> {
    const entry = this.entries.get(token)
    if (entry !== undefined && now - entry.at < TOKEN_CACHE_MS) return entry.record
    this.entries.delete(token) // stale or absent; re-inserted last, so evicted last
    const under = this.lookups.get(token)
    if (under !== undefined && now - under.at < TOKEN_CACHE_MS) return under.answer
    // `now` was taken before the read, so an entry never outlives a change the read missed.
    const digest = digestOf(token)
    const answer = this.store.findToken(digest).then(found => {
      // The store's answer counts only for this digest (a store that answered another is not trusted).
      if (found === undefined || !timingSafeEqual(found.digest, digest)) return undefined
      if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value as string)
      this.entries.set(token, { record: found.record, at: now })
      return found.record
    })
    const lookup = { answer, at: now }
    this.lookups.set(token, lookup)
    const done = (): void => { if (this.lookups.get(token) === lookup) this.lookups.delete(token) }
    answer.then(done, done)
    return answer
  }
}
