import { timingSafeEqual } from 'node:crypto'
import type { Store, TokenRecord } from './store/store.js'
import { digestOf, TOKEN_CACHE_MS } from './tokens.js'

const CAPACITY = 10_000

interface Entry { record: TokenRecord, at: number }
interface Read { answer: Promise<TokenRecord | undefined>, at: number }

/**
 * Recent token checks, kept for TOKEN_CACHE_MS and keyed by the token as presented (it is in
 * memory with the request anyway), so that a token seen within the last second costs neither
 * a hash nor a store read. A hit is decided by the map's own comparison of the presented string
 * with the remembered one; comparing the two again could not fail, so there is no second compare.
 * A miss asks the store by SHA-256 digest, so what its lookup's timing depends on is a digest,
 * never the token. Revocation by the CLI waits TOKEN_CACHE_MS before it returns, so a revoked
 * token is refused from the first request after `tokens revoke` has finished; expiry is checked
 * by the caller on every request. Unknown tokens are not remembered: no memory spent on
 * guessing. When full, the oldest entry makes room. A store read under way is shared by the
 * requests that present its token meanwhile (otherwise every request in flight when an entry
 * lapses would hash and read alike), under the same rule as an entry: only within
 * TOKEN_CACHE_MS of the read's start. A read that fails fails every request that shared it.
 */
export class TokenCache {
  private readonly entries = new Map<string, Entry>()
  /** Store reads under way, by token: kept apart from the entries, so that guessed tokens never evict a remembered one. */
  private readonly reads = new Map<string, Read>()

  constructor (private readonly store: Store) {}

  /** The stored token that `token` is, or undefined: from memory if checked within TOKEN_CACHE_MS, else a promise of the store's answer (shared with the requests that present the same token meanwhile). */
  check (token: string, now = performance.now()): TokenRecord | undefined | Promise<TokenRecord | undefined> {
    const entry = this.entries.get(token)
    if (entry !== undefined && now - entry.at < TOKEN_CACHE_MS) return entry.record
    this.entries.delete(token) // stale or absent; re-inserted last, so evicted last
    const underWay = this.reads.get(token)
    if (underWay !== undefined && now - underWay.at < TOKEN_CACHE_MS) return underWay.answer
    // `now` was taken before the read, so an entry never outlives a change the read missed.
    const digest = digestOf(token)
    const answer = this.store.findToken(digest).then(found => {
      // The store's answer counts only for this digest (a store that answered another is not trusted).
      if (found === undefined || !timingSafeEqual(found.digest, digest)) return undefined
      if (this.entries.size >= CAPACITY) this.entries.delete(this.entries.keys().next().value as string)
      this.entries.set(token, { record: found.record, at: now })
      return found.record
    })
    const read = { answer, at: now }
    this.reads.set(token, read)
    // Once settled it is no longer shared; a newer read of the same token stays.
    const forget = (): void => { if (this.reads.get(token) === read) this.reads.delete(token) }
    answer.then(forget, forget)
    return answer
  }
}
