import assert from 'node:assert/strict'
import { test } from 'node:test'
import { compiledOnce, validatorCompiler } from '../../src/compilers.js'

const path = { type: 'object', properties: { id: { type: 'integer', format: 'int64' } }, required: ['id'], additionalProperties: false }

test('a schema is compiled once however many routes name it: equal schemas share one validator, each reading its own', () => {
  const first = validatorCompiler({ schema: path, httpPart: 'params' })
  assert.equal(validatorCompiler({ schema: structuredClone(path), httpPart: 'params' }), first, 'an equal schema, another object')
  assert.equal(validatorCompiler({ schema: structuredClone(path), httpPart: 'querystring' }), first, 'path and query are both read from text')
  const body = validatorCompiler({ schema: structuredClone(path), httpPart: 'body' })
  assert.notEqual(body, first, 'a body is read as JSON, not text: its own validator')
  // Each reads as its part is written: digits in text, a number in JSON.
  assert.equal(first({ id: '12' }), true)
  assert.equal(first({ id: 12 }), true, 'a default the schema filled in')
  assert.equal(body({ id: '12' }), false)
  assert.equal(body({ id: 12 }), true)
  assert.notEqual(validatorCompiler({ schema: { ...path, required: [] }, httpPart: 'params' }), first, 'another schema')
})

test('compiledOnce compiles each distinct schema of a kind once', () => {
  let compiles = 0
  const compile = (): object => { compiles++; return {} }
  const made = compiledOnce('a kind of its own', { type: 'string' }, compile)
  assert.equal(compiledOnce('a kind of its own', { type: 'string' }, compile), made)
  assert.notEqual(compiledOnce('another kind', { type: 'string' }, compile), made)
  assert.notEqual(compiledOnce('a kind of its own', { type: 'number' }, compile), made)
  assert.equal(compiles, 3)
})
