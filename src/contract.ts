import { readFileSync } from 'node:fs'
import { Ajv, type Options, type SchemaObject } from 'ajv'

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
  const group = (place: string): Schema | undefined => {
    const list = parameters.filter(p => p.in === place)
    if (list.length === 0) return undefined
    return {
      type: 'object',
      properties: Object.fromEntries(list.map(p => [p.name, p.schema])),
      required: list.filter(p => p.required === true).map(p => p.name)
    }
  }
  const response = Object.fromEntries(Object.entries(operation.responses as Record<string, Schema>).map(([status, answer]) =>
    [status, jsonSchemaOf((deref(answer) as Schema).content) ?? {}]))
  const requestBody = deref(operation.requestBody) as Schema | undefined
  const schema = Object.fromEntries(Object.entries({
    params: group('path'),
    querystring: group('query'),
    body: requestBody === undefined ? undefined : jsonSchemaOf(requestBody.content),
    response
  }).filter(([, value]) => value !== undefined))
  return { method: method.toUpperCase(), url: path.replace(/\{(\w+)\}/g, ':$1'), schema }
}

const pathPatterns = [...new Set(operations.map(op => op.path))].map(path => ({
  pattern: new RegExp('^' + path.replace(/\{\w+\}/g, '[^/]+') + '$'),
  methods: operations.filter(op => op.path === path).flatMap(op => op.method === 'get' ? ['GET', 'HEAD'] : [op.method.toUpperCase()])
}))

/** The methods the document allows on a concrete path, for 405's Allow header; empty for an unknown path. */
export function allowedMethods (path: string): string[] {
  return pathPatterns.find(({ pattern }) => pattern.test(path))?.methods ?? []
}

export const INT64_MIN = -(2n ** 63n)
export const INT64_MAX = 2n ** 63n - 1n

/**
 * JavaScript numbers cannot hold every int64, so `{type: integer, format: int64}` is checked by
 * our keyword instead: a safe-integer number or a bigint in range (the JSON parser hands over
 * big integers as bigints), and for path and query text, a decimal string, turned into a bigint.
 */
function int64Schemas (schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(int64Schemas)
  if (schema === null || typeof schema !== 'object') return schema
  const { type, format, ...rest } = schema as Schema
  if (type === 'integer' && format === 'int64') return { ...rest, 'x-int64': true }
  return Object.fromEntries(Object.entries(schema).map(([key, value]) => [key, int64Schemas(value)]))
}

function makeAjv (options: Options, fromText: boolean): Ajv {
  const ajv = new Ajv({ allErrors: false, strict: false, ...options })
  ajv.addFormat('int32', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 })
  ajv.addKeyword({
    keyword: 'x-int64',
    modifying: fromText,
    errors: false,
    validate: (_: unknown, data: unknown, _schema?: unknown, context?: { parentData: Record<string | number, unknown>, parentDataProperty: string | number }) => {
      if (typeof data === 'number') return Number.isSafeInteger(data)
      if (typeof data === 'bigint') return data >= INT64_MIN && data <= INT64_MAX
      if (fromText && typeof data === 'string' && /^-?\d{1,19}$/.test(data)) {
        const value = BigInt(data)
        if (value < INT64_MIN || value > INT64_MAX || context === undefined) return false
        context.parentData[context.parentDataProperty] = value
        return true
      }
      return false
    }
  })
  return ajv
}

// Bodies are never coerced ("1" is not an id); path and query parameters arrive as text and are.
const bodyAjv = makeAjv({ coerceTypes: false, useDefaults: true }, false)
const textAjv = makeAjv({ coerceTypes: true, useDefaults: true }, true)

/** Fastify's validator compiler: the document's schemas, with int64 kept exact. */
export function validatorCompiler ({ schema, httpPart }: { schema: SchemaObject, httpPart?: string }): (data: unknown) => boolean {
  const ajv = httpPart === 'body' ? bodyAjv : textAjv
  return ajv.compile(int64Schemas(schema) as SchemaObject)
}
