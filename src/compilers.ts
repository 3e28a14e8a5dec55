// Fastify's compilers for the document's schemas: Ajv validators with int64 kept exact, and the
// cache that compiles each distinct schema once (the serializers' too, in app.ts). Apart from
// contract.ts so that the commands that validate nothing do not load Ajv.
import { Ajv, type SchemaObject, type ValidateFunction } from 'ajv'
import type { Schema } from './contract.js'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n

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
