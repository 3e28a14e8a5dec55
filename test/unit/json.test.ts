import assert from 'node:assert/strict'
import { test } from 'node:test'
import { exactNumber, JsonError, MAX_DEPTH, parseJson as parse, stringifyExact } from '../../src/json.js'

const parseJson = (text: string): any => parse(text)

/** Asserts that `text` is refused with a JsonError whose sentence matches `why`. */
function refuses (text: string, why: RegExp): void {
  assert.throws(() => parse(text), (error: Error) => error instanceof JsonError && why.test(error.message), text)
}

test('integers beyond 2^53 parse as exact bigints, smaller ones as numbers', () => {
  assert.equal(parseJson('{"id": 9223372036854775807}').id, 9223372036854775807n)
  assert.equal(parseJson('{"id": -9223372036854775808}').id, -9223372036854775808n)
  assert.equal(parseJson('{"id": 9007199254740993}').id, 9007199254740993n)
  assert.equal(parseJson('{"id": 42}').id, 42)
  assert.equal(Object.is(parseJson('{"id": -0}').id, 0), true)
})

test('integral literals with fractions or exponents are integers, exactly', () => {
  assert.equal(exactNumber('1.0'), 1)
  assert.equal(exactNumber('1e2'), 100)
  assert.equal(exactNumber('9.223372036854775807e18'), 9223372036854775807n)
  assert.equal(exactNumber('-0'), 0)
  assert.equal(parseJson('{"id": 1.0}').id, 1)
})

test('integers of up to 20 digits are exact, so int64\'s bounds hold to the unit; longer ones are their doubles (no bigint of hundreds of digits built)', () => {
  assert.equal(exactNumber('9223372036854775808'), 9223372036854775808n)
  assert.equal(exactNumber('-9223372036854775809'), -9223372036854775809n)
  assert.equal(exactNumber('99999999999999999999'), 99999999999999999999n)
  assert.equal(exactNumber('9.9999999999999999999e19'), 99999999999999999999n)
  assert.equal(exactNumber('100000000000000000000'), 1e20)
  assert.equal(exactNumber('1e308'), 1e308)
  assert.equal(exactNumber('-1' + '0'.repeat(5000)), -Infinity)
})

test('non-integers never pass for integers, even when the nearest double is one', () => {
  assert.equal(exactNumber('1.5'), 1.5)
  assert.ok(Number.isNaN(exactNumber('9007199254740993.5')))
  assert.ok(Number.isNaN(exactNumber('1e-400')))
  assert.ok(Number.isNaN(exactNumber('999999999999999.000000000000001')))
})

test('reads everything JSON.parse reads, the same way', () => {
  for (const text of ['{}', '[]', '""', '0', '-1.5e-3', 'true', 'false', 'null', ' \t\r\n{ "a" : [ 1 , "b" , null , { } ] } ',
    '"\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\u0000"', '"🌱 \\ud83c\\udf31"', '{"a":{"b":{"c":[[[]]]}}}', '{"":1,"b":""}']) {
    assert.deepEqual(parse(text), JSON.parse(text), text)
  }
})

test('malformed JSON is refused', () => {
  for (const text of ['', '{"id": 1', '{"id": 12345678901234567890', '{id: 1}', "{'a': 1}", '{"a": 1,}', '[1,]', '01', '1.', '.5', '-', '1e',
    '"a', '"\u0001"', '"\\x41"', '"\\u12g4"', 'tru', 'nul', '{"a" 1}', '{} {}', 'NaN', 'Infinity', '+1']) {
    refuses(text, /not valid JSON/)
  }
})

test('a key given twice in one object is refused, whatever else the body holds', () => {
  refuses('{"id":1,"name":"a","name":"b"}', /"name" twice/)
  refuses('{"id":1.0,"name":"a","name":"a"}', /"name" twice/)
  refuses('{"id":1,"x":{"k":1,"k":2}}', /"k" twice/)
  refuses('{"__proto__":1,"__proto__":2}', /"__proto__" twice/)
  assert.deepEqual(parseJson('[{"k":1},{"k":2}]'), [{ k: 1 }, { k: 2 }], 'the same key in two objects is fine')
})

test('__proto__ is an own key, as JSON.parse makes it, never the prototype', () => {
  const value = parseJson('{"__proto__": {"polluted": true}}')
  assert.equal(Object.getPrototypeOf(value), Object.prototype)
  assert.deepEqual(Object.keys(value), ['__proto__'])
  assert.equal(({} as any).polluted, undefined)
})

test('nesting is bounded', () => {
  assert.doesNotThrow(() => parse('['.repeat(MAX_DEPTH) + ']'.repeat(MAX_DEPTH)))
  refuses('['.repeat(MAX_DEPTH + 1) + ']'.repeat(MAX_DEPTH + 1), /deeper than 32/)
  refuses('{"a":'.repeat(100_000) + '1' + '}'.repeat(100_000), /deeper than 32/)
})

test('a lone surrogate is refused, escaped or not; a pair is text', () => {
  for (const text of ['"\\ud800"', '"\\udc00"', '"a\\ud800b"', '"\\udc00\\ud800"', '"\ud800"', '{"name":"\\ud83c"}']) refuses(text, /lone surrogate/)
  assert.equal(parse('"\\ud83c\\udf31"'), '🌱')
  assert.equal(parse('"\\ud83c\udf31"'), '🌱', 'an escaped high and a raw low half make one character')
})

test('stringifyExact writes bigints as exact integers and nothing else as a number', () => {
  const at = new Date('2026-11-25T00:00:00.000Z')
  const value = { position: 9223372036854775807n, id: -9007199254740993n, plant: { name: '\u0000123\u0000', tag: undefined }, at, list: [1n, undefined, 'x'] }
  const text = stringifyExact(value)
  assert.equal(text, '{"position":9223372036854775807,"id":-9007199254740993,"plant":{"name":"\\u0000123\\u0000"},"at":"2026-11-25T00:00:00.000Z","list":[1,null,"x"]}')
  assert.deepEqual(parseJson(text), { position: 9223372036854775807n, id: -9007199254740993n, plant: { name: '\u0000123\u0000' }, at: at.toISOString(), list: [1, null, 'x'] })
})
