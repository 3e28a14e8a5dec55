import { Validator } from '@seriousme/openapi-schema-validator'
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, startServer } from '../helpers.js'

// The seed (shared/seed/plant-store-interface.md), transcribed: what the served document must say.
const seed = {
  Plant: { required: ['name'], properties: { name: { type: 'string' }, tag: { type: 'string' } } },
  NewPlant: { required: ['id', 'name'], properties: { id: { type: 'integer', format: 'int64' }, name: { type: 'string' }, tag: { type: 'string' } } },
  Error: { required: ['error', 'message'], properties: { error: { type: 'integer', format: 'int32' }, message: { type: 'string' } } }
}

type Schema = Record<string, any>

function resolve (doc: Schema, schema: Schema): Schema {
  return typeof schema.$ref === 'string' ? schema.$ref.slice(2).split('/').reduce((node: Schema, key: string) => node[key], doc) : schema
}

/** A schema reduced to what the seed fixes: fields, their types and formats, and the required list. */
function shape (doc: Schema, schema: Schema): Schema {
  const resolved = resolve(doc, schema)
  return {
    required: [...resolved.required].sort(),
    properties: Object.fromEntries(Object.entries(resolved.properties as Schema).map(([name, field]: [string, Schema]) =>
      [name, field.format === undefined ? { type: field.type } : { type: field.type, format: field.format }]))
  }
}

test('the served document is valid OpenAPI 3.1.0, version 1.0.0, MIT, and needs no token', async (t) => {
  const server = await startServer(t)
  const answer = await call(server, 'GET', '/openapi.json', { token: null })
  assert.equal(answer.status, 200)
  assert.equal(answer.body.openapi, '3.1.0')
  assert.equal(answer.body.info.version, '1.0.0')
  assert.equal(answer.body.info.license.identifier, 'MIT')
  const validator = new Validator()
  const result = await validator.validate(answer.body)
  assert.deepEqual(result, { valid: true })
  assert.equal(validator.version, '3.1')
})

test("the served POST /plants, its schemas and its security are the seed's", async (t) => {
  const server = await startServer(t)
  const doc = (await call(server, 'GET', '/openapi.json', { token: null })).body
  for (const name of ['Plant', 'NewPlant', 'Error'] as const) {
    assert.deepEqual(shape(doc, doc.components.schemas[name]), { ...seed[name], required: [...seed[name].required].sort() }, name)
  }
  const operation = doc.paths['/plants'].post
  assert.equal(operation.parameters, undefined, 'no path or query parameters')
  assert.equal(operation.requestBody.required, true)
  assert.deepEqual(Object.keys(operation.requestBody.content), ['application/json'])
  assert.deepEqual(shape(doc, operation.requestBody.content['application/json'].schema), shape(doc, doc.components.schemas.NewPlant))
  assert.deepEqual(Object.keys(operation.responses).sort(), ['200', '400'])
  assert.deepEqual(shape(doc, operation.responses['200'].content['application/json'].schema), shape(doc, doc.components.schemas.Plant))
  assert.deepEqual(shape(doc, operation.responses['400'].content['application/json'].schema), shape(doc, doc.components.schemas.Error))
  const security = operation.security ?? doc.security
  assert.deepEqual(security, [{ bearerAuth: [] }])
  assert.deepEqual(doc.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer' })
})
