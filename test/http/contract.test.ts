import { Validator } from '@seriousme/openapi-schema-validator'
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, startServer, testStores } from '../helpers.js'

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

// POST /plants as published, word for word. Its summary and tag are documentation that the lint
// rules ask of every operation (and that client generators group by); they change no contract.
const publishedAddPlant = {
  operationId: 'addPlant',
  description: 'Creates a new plant in the store.',
  requestBody: { description: 'Plant to add to the store', required: true, content: { 'application/json': { schema: { $ref: '#/components/schemas/NewPlant' } } } },
  responses: {
    200: { description: 'plant response', content: { 'application/json': { schema: { $ref: '#/components/schemas/Plant' } } } },
    400: { description: 'unexpected error', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } }
  }
}

/** Every operation but the seed's, as `METHOD path` and the operation. */
function ownOperations (doc: Schema): Array<[string, Schema]> {
  return Object.entries(doc.paths as Schema).flatMap(([path, item]: [string, Schema]) =>
    Object.entries(item).filter(([method]) => method !== 'parameters').map(([method, operation]): [string, Schema] => [`${method.toUpperCase()} ${path}`, operation]))
    .filter(([name]) => name !== 'POST /plants')
}

// The document does not depend on the store; each store's server serves it all the same.
for (const store of testStores()) {
  describe(store, () => {
    test('the served document, which needs no token', async (t) => {
      const server = await startServer(t, { store })
      const answer = await call(server, 'GET', '/openapi.json', { token: null })
      assert.equal(answer.status, 200, 'served without a token')
      const doc: Schema = answer.body

      await t.test('is valid OpenAPI 3.1.0, version 1.0.0, MIT', async () => {
        assert.equal(doc.openapi, '3.1.0')
        assert.equal(doc.info.version, '1.0.0')
        assert.equal(doc.info.license.identifier, 'MIT')
        const validator = new Validator()
        const result = await validator.validate(doc)
        assert.deepEqual(result, { valid: true })
        assert.equal(validator.version, '3.1')
      })

      await t.test("the served POST /plants, its schemas and its security are the seed's", () => {
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

      await t.test('the served POST /plants is the published operation exactly: nothing reworded, only a summary and a tag added', () => {
        const { summary, tags, ...contract } = doc.paths['/plants'].post
        assert.deepEqual(contract, publishedAddPlant)
        assert.equal(summary, 'Create a plant')
        assert.deepEqual(tags, ['plants'])
      })

      await t.test('every operation has a summary and a tag the document defines', () => {
        assert.ok(Array.isArray(doc.tags), 'the document defines its tags')
        const defined = (doc.tags as Schema[]).map(tag => tag.name)
        const operations = [...ownOperations(doc), ['POST /plants', doc.paths['/plants'].post] as [string, Schema]]
        assert.ok(operations.length >= 8, 'the seed\'s, the extensions, the probes and the document are there')
        for (const [name, operation] of operations) {
          assert.equal(typeof operation.summary, 'string', `${name} has a summary`)
          assert.ok(operation.summary.length > 0, `${name} has a summary`)
          assert.ok(Array.isArray(operation.tags) && operation.tags.length > 0, `${name} has tags`)
          for (const tag of operation.tags) assert.ok(defined.includes(tag), `${name}: tag ${tag} is defined`)
        }
      })

      await t.test('our operations\' 401, 405, 429 and 503 answers declare WWW-Authenticate, Allow and Retry-After', () => {
        const required: Record<string, string> = { 401: 'WWW-Authenticate', 405: 'Allow', 429: 'Retry-After', 503: 'Retry-After' }
        for (const [name, operation] of ownOperations(doc)) {
          const secured = (operation.security ?? doc.security).length > 0
          const expected = secured ? ['401', '405', '429', '503'] : ['405']
          for (const status of expected) assert.ok(operation.responses[status] !== undefined, `${name} lists ${status}`)
          for (const [status, answer] of Object.entries(operation.responses as Schema)) {
            const header = required[status]
            if (header === undefined) continue
            const headers = resolve(doc, answer).headers ?? {}
            assert.ok(headers[header] !== undefined, `${name} ${status} declares ${header}`)
            assert.ok(resolve(doc, headers[header]).schema !== undefined, `${name} ${status}: ${header} has a schema`)
          }
        }
        assert.ok(doc.paths['/plants'].get.responses['200'].headers.Link !== undefined, 'GET /plants 200 declares Link')
      })

      await t.test('our secured operations list 414 where they take a path parameter, and 413 and 415 where they read a body', () => {
        for (const [name, operation] of ownOperations(doc)) {
          if ((operation.security ?? doc.security).length === 0) continue // the probes and the document: their 4XX covers these
          const [method, path] = name.split(' ')
          if (path.includes('{')) assert.ok(operation.responses['414'] !== undefined, `${name} lists 414`)
          // Every body that reaches a route is read (DELETE's too, then ignored); a POST or PUT's must be JSON.
          if (method !== 'GET') assert.ok(operation.responses['413'] !== undefined, `${name} lists 413`)
          if (method === 'POST' || method === 'PUT') assert.ok(operation.responses['415'] !== undefined, `${name} lists 415`)
        }
      })
    })
  })
}
