// The entity-tag lists of If-Match and If-None-Match (RFC 9110 8.8.3, 13.1), read into versions.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { versionsOf } from '../../src/conditions.js'
import { ApiError } from '../../src/errors.js'

const read = (header: string, weak = true): unknown => versionsOf(header, 'If-None-Match', { weak })

test('a list of entity-tags gives the versions among them; other tags match no plant', () => {
  assert.deepEqual(read('"5"'), [5n])
  assert.deepEqual(read(' "5" , W/"6","x" '), [5n, 6n])
  assert.deepEqual(read('W/"6"', false), [], 'a weak tag never matches a strong comparison')
  assert.deepEqual(read('"a,b", "9"'), [9n], 'a comma inside a tag is part of it, not a separator')
  assert.deepEqual(read(', ,"3" ,'), [3n], 'empty list elements are allowed')
  assert.deepEqual(read('"01", "0", ""'), [], 'not versions of ours')
  assert.equal(read(' * '), '*')
  assert.equal(versionsOf(undefined, 'If-Match', { weak: false }), undefined)
})

test('a header that is not a list of entity-tags is refused, never read as none', () => {
  for (const header of ['', ',', ' , ', '5', '"5', '"5" "6"', 'W/ "5"', 'w/"5"', '"5",*', '"a"b"', '"5";q=1']) {
    assert.throws(() => read(header), (error: unknown) => error instanceof ApiError && error.status === 400, JSON.stringify(header))
  }
})

test('a long header is read in linear time: 16 KiB (all the headers Node takes) before a bad character is refused at once', () => {
  for (const header of [`"1",${' '.repeat(16_384)}x`, `${' \t'.repeat(8192)}"1" x`, `"1"${', '.repeat(8192)}"`]) {
    const start = performance.now()
    assert.throws(() => read(header), ApiError)
    const ms = performance.now() - start
    assert.ok(ms < 100, `${ms.toFixed(1)} ms for ${header.length} characters`)
  }
})
