import assert from 'node:assert/strict'
import { test } from 'node:test'
import { TimedCache } from '../../src/timed-cache.js'

test('an entry is served until it is maxAgeMs old, counted from when its read began', () => {
  const cache = new TimedCache<string, number>(1000, 10)
  cache.set('a', 1, 5000)
  assert.equal(cache.get('a', 5000), 1)
  assert.equal(cache.get('a', 5999), 1)
  assert.equal(cache.get('a', 6000), undefined)
  assert.equal(cache.size, 0, 'an expired entry is dropped when found')
})

test('when full, the entry set longest ago makes room; setting again refreshes the order', () => {
  const cache = new TimedCache<number, string>(1000, 3)
  cache.set(1, 'one', 0)
  cache.set(2, 'two', 0)
  cache.set(3, 'three', 0)
  cache.set(1, 'one again', 0)
  cache.set(4, 'four', 0)
  assert.equal(cache.size, 3)
  assert.equal(cache.get(2, 0), undefined)
  assert.deepEqual([1, 3, 4].map(key => cache.get(key, 0)), ['one again', 'three', 'four'])
})

test('keys match by value: a digest\'s base64 text finds its entry', () => {
  const cache = new TimedCache<string, string>(1000, 10)
  cache.set(Buffer.from('digest').toString('base64'), 'found', 0)
  assert.equal(cache.get(Buffer.from('digest').toString('base64'), 0), 'found')
  assert.equal(cache.get(Buffer.from('other').toString('base64'), 0), undefined)
})
