import { readFileSync } from 'node:fs'
import { Ajv, type SchemaObject, type ValidateFunction } from 'ajv'

/** The OpenAPI document, the one source of truth for routes, validation and serialization. */
export const document = JSON.parse(readFileSync(new URL('../openapi/plantstore.json', import.meta.url), 'utf8'))

type Schema = Record<string, unknown>
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

export const INT64_MIN = -(2n ** 63n)
export const INT64_MAX = 2n ** 63n - 1n

const INT_RANGES: Record<string, [bigint, bigint]> = {
  int64: [INT64_MIN, INT64_MAX],
  int32: [-(2n ** 31n), 2n ** 31n - 1n]
}

/**
 * Integers are checked by our keywords, not Ajv's `type: integer`: JavaScript numbers cannot hold
 * every int64, and Ajv's coercion of path and query text would take `1e2` or ` 1` for numbers.
 * In bodies, `x-int64` takes a safe-integer number or a bigint within the schema's bounds (the
 * JSON reader gives integers beyond 2^53 as bigints) and hands it on as a bigint, whatever its size. In path and
 * query text, `x-integer` takes plain decimal digits only, within the schema's bounds.
 */
function integerKeywords (schema: unknown, fromText: boolean): unknown {
  if (Array.isArray(schema)) return schema.map(item => integerKeywords(item, fromText))
  if (schema === null || typeof schema !== 'object') return schema
  const { type, format, minimum, maximum, ...rest } = schema as Schema
  if (type === 'integer') {
    const [low, high] = INT_RANGES[format as string] ?? [BigInt(Number.MIN_SAFE_INTEGER), BigInt(Number.MAX_SAFE_INTEGER)]
    const bounds = { int64: format === 'int64', minimum: String(minimum ?? low), maximum: String(maximum ?? high) }
    if (fromText) return { ...rest, 'x-integer': bounds }
    if (format === 'int64') return { ...rest, 'x-int64': bounds }
  }
  return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, integerKeywords(value, fromText)]))
}

interface KeywordContext { parentData: Record<string | number, unknown>, parentDataProperty: string | number }

/** Plain decimal, one way to write each number: no sign on 0, no leading zeros (so `/plants/01` is no second name for plant 1). */
const DECIMAL = /^(0|-?[1-9]\d{0,18})$/

function makeAjv (fromText: boolean): Ajv {
  // `verbose` puts the offending value in each complaint, so that a repeated query parameter
  // (an array) can be told from a malformed one. Bodies are never coerced: "1" is not an id.
  // The schemas are not checked against JSON Schema's meta-schema at each start (a tenth of a
  // start's CPU): the document's tests and `npm run lint:openapi` check the whole document.
  const ajv = new Ajv({ allErrors: false, strict: false, coerceTypes: false, useDefaults: true, verbose: true, validateSchema: false })
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 })
  // Each keyword is compiled once per schema: its bounds become bigints then, not per request.
  const boundsOf = ({ minimum, maximum }: { minimum: string, maximum: string }): [bigint, bigint] => [BigInt(minimum), BigInt(maximum)]
  ajv.addKeyword({
    keyword: 'x-int64',
    modifying: true,
    errors: false,
    compile: (bounds: { minimum: string, maximum: string }) => {
      const [minimum, maximum] = boundsOf(bounds)
      return (data: unknown, context?: KeywordContext) => {
        if (typeof data !== 'bigint' && (typeof data !== 'number' || !Number.isSafeInteger(data))) return false
        const value = BigInt(data)
        if (value < minimum || value > maximum || context === undefined) return false
        context.parentData[context.parentDataProperty] = value
        return true
      }
    }
  })
  ajv.addKeyword({
    keyword: 'x-integer',
    modifying: true,
    errors: false,
    compile: (bounds: { int64: boolean, minimum: string, maximum: string }) => {
      const [minimum, maximum] = boundsOf(bounds)
      return (data: unknown, context?: KeywordContext) => {
        if (typeof data === 'number') return Number.isInteger(data) // a default the schema filled in
        if (typeof data !== 'string' || !DECIMAL.test(data) || context === undefined) return false
        const value = BigInt(data)
        if (value < minimum || value > maximum) return false
        context.parentData[context.parentDataProperty] = bounds.int64 ? value : Number(value)
        return true
      }
    }
  })
  return ajv
}

const bodyAjv = makeAjv(false)
const textAjv = makeAjv(true)

/** What was compiled, by kind and schema text: most routes share their query's and path's schemas and their error answers', and HEAD shares GET's. */
const compiled = new Map<string, unknown>()

/** What `compile` makes of `schema`, made once for each distinct schema of a kind (a validator, a serializer). Schemas are JSON, the document's: their text is their key. */
export function compiledOnce<T> (kind: string, schema: unknown, compile: () => T): T {
  const key = `${kind} ${JSON.stringify(schema)}`
  if (!compiled.has(key)) compiled.set(key, compile())
  return compiled.get(key) as T
}

/** Fastify's validator compiler: the document's schemas, with int64 kept exact. */
export function validatorCompiler ({ schema, httpPart }: { schema: SchemaObject, httpPart?: string }): ValidateFunction {
  const fromText = httpPart !== 'body'
  return compiledOnce(fromText ? 'text' : 'body', schema, () => (fromText ? textAjv : bodyAjv).compile(integerKeywords(schema, fromText) as SchemaObject))
}
