import assert from 'node:assert/strict'
import { test } from 'node:test'
import { exactNumber, parseJson as parse } from '../../src/json.js'

const parseJson = (text: string): any => parse(text)

test('integers beyond 2^53 parse as exact bigints, smaller ones as numbers', () => {
  assert.equal(parseJson('{"id": 9223372036854775807}').id, 9223372036854775807n)
  assert.equal(parseJson('{"id": -9223372036854775808}').id, -9223372036854775808n)
  assert.equal(parseJson('{"id": 9007199254740993}').id, 9007199254740993n)
  assert.equal(parseJson('{"id": 42}').id, 42)
})

test('integral literals with fractions or exponents are integers, exactly', () => {
  assert.equal(exactNumber('1.0'), 1)
  assert.equal(exactNumber('1e2'), 100)
  assert.equal(exactNumber('9.223372036854775807e18'), 9223372036854775807n)
  assert.equal(exactNumber('-0'), 0)
})

test('non-integers never pass for integers, even when the nearest double is one', () => {
  assert.equal(exactNumber('1.5'), 1.5)
  assert.ok(Number.isNaN(exactNumber('9007199254740993.5')))
  assert.ok(Number.isNaN(exactNumber('1e-400')))
  assert.ok(Number.isNaN(exactNumber('999999999999999.000000000000001')))
})

test('malformed JSON throws on both the fast and the exact path', () => {
  assert.throws(() => parseJson('{"id": 1'))
  assert.throws(() => parseJson('{"id": 12345678901234567890'))
})
