import assert from 'node:assert/strict'
import { test } from 'node:test'
import type { Store } from '../../src/store/store.js'
import { TokenCache } from '../../src/token-cache.js'
import { digestOf, TOKEN_CACHE_MS } from '../../src/tokens.js'

/** A store that knows the tokens in `known` and counts its reads. */
function countingStore (known: string[]): Store & { reads: number } {
  const digests = new Set(known.map(token => digestOf(token).toString('hex')))
  const store = {
    reads: 0,
    async findToken (digest: Buffer) {
      store.reads++
      if (!digests.has(digest.toString('hex'))) return undefined
      return { digest, record: { id: 1, name: 'ci', scopes: ['plants:read' as const], createdAt: new Date(0) } }
    }
  }
  return store as unknown as Store & { reads: number }
}

test('a found token is answered from memory, synchronously, without a store read, for TOKEN_CACHE_MS from before its read', async () => {
  const store = countingStore(['a'])
  const cache = new TokenCache(store)
  const first = cache.check('a', 1000)
  assert.ok(first instanceof Promise)
  assert.equal((await first)?.name, 'ci')
  const again = cache.check('a', 1000 + TOKEN_CACHE_MS - 1)
  assert.ok(!(again instanceof Promise))
  assert.equal(again?.name, 'ci')
  assert.equal(store.reads, 1)
  assert.ok(cache.check('a', 1000 + TOKEN_CACHE_MS) instanceof Promise, 'stale at TOKEN_CACHE_MS')
  assert.equal(store.reads, 2)
})

test('unknown tokens are read every time, never remembered', async () => {
  const store = countingStore([])
  const cache = new TokenCache(store)
  assert.equal(await cache.check('guess', 0), undefined)
  assert.equal(await cache.check('guess', 1), undefined)
  assert.equal(store.reads, 2)
})

test('at 10,000 tokens the oldest makes room; memory stays bounded', async () => {
  const tokens = Array.from({ length: 10_001 }, (_, i) => `t${i}`)
  const store = countingStore(tokens)
  const cache = new TokenCache(store)
  for (const token of tokens) await cache.check(token, 0)
  assert.equal(store.reads, 10_001)
  assert.ok(!(cache.check('t10000', 0) instanceof Promise), 'the newest is kept')
  assert.ok(!(cache.check('t1', 0) instanceof Promise), 'the second oldest is kept')
  assert.ok(cache.check('t0', 0) instanceof Promise, 'the oldest was evicted')
})

test('the store\'s answer counts only if its digest is the presented token\'s', async () => {
  const store = { findToken: async () => ({ digest: digestOf('someone else'), record: { id: 1, name: 'x', scopes: [], createdAt: new Date(0) } }) } as unknown as Store
  const cache = new TokenCache(store)
  assert.equal(await cache.check('mine', 0), undefined)
  assert.ok(cache.check('mine', 1) instanceof Promise, 'and a refusal is not remembered')
})

/** A store that knows the token 'a' and answers each read only when `answer()` is called. */
function heldStore (): Store & { reads: number, answer: (known: boolean) => void } {
  const waiting: Array<(known: boolean) => void> = []
  const store = {
    reads: 0,
    async findToken (digest: Buffer) {
      store.reads++
      const known = await new Promise<boolean>(resolve => waiting.push(resolve))
      return known ? { digest, record: { id: 1, name: 'ci', scopes: ['plants:read' as const], createdAt: new Date(0) } } : undefined
    },
    answer: (known: boolean) => { for (const resolve of waiting.splice(0)) resolve(known) }
  }
  return store as unknown as Store & { reads: number, answer: (known: boolean) => void }
}

test('the requests that present one token while its read is under way share that read', async () => {
  const store = heldStore()
  const cache = new TokenCache(store)
  const checks = [cache.check('a', 0), cache.check('a', 10), cache.check('a', TOKEN_CACHE_MS - 1)]
  assert.equal(store.reads, 1)
  store.answer(true)
  assert.deepEqual((await Promise.all(checks)).map(record => record?.name), ['ci', 'ci', 'ci'])
  assert.ok(!(cache.check('a', 20) instanceof Promise), 'then from memory')
  assert.equal(store.reads, 1)
})

test('a read under way is shared only within TOKEN_CACHE_MS of its start, as an entry is', async () => {
  const store = heldStore()
  const cache = new TokenCache(store)
  const early = cache.check('a', 0)
  // A token revoked while the first read waited: a request TOKEN_CACHE_MS later must see the revocation.
  const late = cache.check('a', TOKEN_CACHE_MS)
  assert.equal(store.reads, 2)
  store.answer(false)
  assert.equal(await early, undefined)
  assert.equal(await late, undefined)
  assert.ok(cache.check('a', TOKEN_CACHE_MS + 1) instanceof Promise, 'an unknown token is read again once its read is over')
  assert.equal(store.reads, 3)
})

test('guesses under way never evict a remembered token', async () => {
  const store = countingStore(['a'])
  const cache = new TokenCache(store)
  await cache.check('a', 0)
  const guesses = Array.from({ length: 10_001 }, (_, i) => cache.check(`guess${i}`, 0))
  assert.ok(!(cache.check('a', 1) instanceof Promise), 'still answered from memory')
  assert.ok((await Promise.all(guesses)).every(record => record === undefined))
  assert.equal(store.reads, 10_002)
})

test('a shared read that fails fails each request that shared it, and the next check reads again', async () => {
  let reads = 0
  const store = { findToken: async () => { reads++; throw new Error('store unavailable') } } as unknown as Store
  const cache = new TokenCache(store)
  const shared = [cache.check('a', 0), cache.check('a', 1)]
  for (const check of shared) await assert.rejects(check as Promise<unknown>, /store unavailable/)
  assert.equal(reads, 1)
  await assert.rejects(cache.check('a', 2) as Promise<unknown>, /store unavailable/)
  assert.equal(reads, 2)
})
