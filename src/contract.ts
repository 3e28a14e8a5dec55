import { readFileSync } from 'node:fs'

/** The OpenAPI document, the one source of truth for routes, validation and serialization. */
export const document = JSON.parse(readFileSync(new URL('../openapi/plantstore.json', import.meta.url), 'utf8'))

export type Schema = Record<string, unknown>
const METHODS = ['get', 'put', 'post', 'delete', 'patch'] as const

/** A copy of `schema` with every local `$ref` replaced by what it points to. */
function deref (schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(deref)
  if (schema === null || typeof schema !== 'object') return schema
  const ref = (schema as Schema).$ref
  if (typeof ref === 'string') {
    const target = ref.replace(/^#\//, '').split('/').reduce((node: Schema, key) => node[key] as Schema, document)
    return deref(target)
  }
  return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, deref(value)]))
}

interface Operation { method: string, path: string, operation: Schema, pathItem: Schema }

const operations: Operation[] = Object.entries(document.paths as Record<string, Schema>).flatMap(([path, pathItem]) =>
  METHODS.filter(method => pathItem[method] !== undefined).map(method => ({ method, path, pathItem, operation: pathItem[method] as Schema })))

function jsonSchemaOf (content: unknown): Schema | undefined {
  return (deref(content) as Record<string, { schema: Schema }> | undefined)?.['application/json']?.schema
}

/**
 * Fastify route options for the operation `operationId`: method, URL and the schemas for
 * params, query, body and every response, all taken from the document.
 */
export function route (operationId: string): { method: string, url: string, schema: Schema } {
  const found = operations.find(op => op.operation.operationId === operationId)
  if (found === undefined) throw new Error(`The OpenAPI document has no operation ${operationId}.`)
  const { method, path, operation, pathItem } = found
  const parameters = deref([...(pathItem.parameters as unknown[] ?? []), ...(operation.parameters as unknown[] ?? [])]) as Array<{ name: string, in: string, required?: boolean, schema: Schema }>
  const group = (place: string): Schema => {
    const list = parameters.filter(p => p.in === place)
    return {
      type: 'object',
      properties: Object.fromEntries(list.map(p => [p.name, p.schema])),
      required: list.filter(p => p.required === true).map(p => p.name),
      // A query parameter the operation does not define is refused, not ignored: a mistyped
      // filter (`tags=`, `tag[]=`) must not silently answer every plant.
      additionalProperties: false
    }
  }
  const response = Object.fromEntries(Object.entries(operation.responses as Record<string, Schema>).map(([status, answer]) =>
    [status, jsonSchemaOf((deref(answer) as Schema).content) ?? {}]))
  const requestBody = deref(operation.requestBody) as Schema | undefined
  const schema = Object.fromEntries(Object.entries({
    params: parameters.some(p => p.in === 'path') ? group('path') : undefined,
    querystring: group('query'),
    body: requestBody === undefined ? undefined : jsonSchemaOf(requestBody.content),
    response
  }).filter(([, value]) => value !== undefined))
  return { method: method.toUpperCase(), url: path.replace(/\{(\w+)\}/g, ':$1'), schema }
}

// A parameter's segment may be empty, as the router takes it (`/plants/`: its id then fails
// validation, 400): a method no route takes there is 405, as on any other id.
const pathPatterns = [...new Set(operations.map(op => op.path))].map(path => ({
  pattern: new RegExp('^' + path.replace(/\{\w+\}/g, '[^/]*') + '$'),
  methods: operations.filter(op => op.path === path).flatMap(op => op.method === 'get' ? ['GET', 'HEAD'] : [op.method.toUpperCase()])
}))

/** The methods the document allows on a concrete path, for 405's Allow header; empty for an unknown path. */
export function allowedMethods (path: string): string[] {
  return pathPatterns.find(({ pattern }) => pattern.test(path))?.methods ?? []
}

/** The largest request body, in bytes (413 past it); also the longest line `plantstore import` takes. */
export const BODY_LIMIT = 64 * 1024

/**
 * The longest path (the request target before any query) answered: far above any of the API's,
 * below the head that Node refuses as too large (16 KiB). A longer one is 414, also past those
 * 16 KiB (node-refusals.ts).
 */
export const MAX_PATH = 2048
