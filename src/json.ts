/** Why a JSON text was refused; the message is one sentence for the client. */
export class JsonError extends Error {}

/** How deeply arrays and objects may nest in a body; no operation needs more than two levels. */
export const MAX_DEPTH = 32

const LITERAL = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/

/**
 * The exact value of a JSON number literal: a number when that is exact, a bigint for an
 * integer beyond 2^53 of up to 20 digits (a longer one is its double: no field takes it). A
 * non-integer whose nearest double is an integer (1e-400, 2^60 + 0.5) becomes NaN, so that no
 * integer check can mistake it for one.
 */
export function exactNumber (literal: string): number | bigint {
  const value = Number(literal)
  const match = LITERAL.exec(literal)
  if (match === null) return value
  const [, sign, whole, fraction = '', exponentText = '0'] = match
  const exponent = Number(exponentText) - fraction.length
  const digits = (whole + fraction).replace(/^0+(?=\d)/, '')
  const integral = exponent >= 0 || /^0*$/.test(digits.slice(exponent))
  if (!integral) return Number.isInteger(value) ? Number.NaN : value
  if (Number.isSafeInteger(value) || digits === '0') return value === 0 ? 0 : value
  // Beyond 2^53: exact as a bigint, up to 20 digits (int64 has 19: a value just past it is
  // refused for what it is). Longer is far outside every integer field, and its double is refused
  // as well, without building a bigint of hundreds of digits (1e308: 4.5 µs each, a body's worth
  // of them 40 ms).
  if (digits.length + exponent > 20) return value
  return BigInt(sign + (exponent >= 0 ? digits + '0'.repeat(exponent) : digits.slice(0, exponent)))
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

const ESCAPES: Record<string, string> = { '"': '"', '\\': '\\', '/': '/', b: '\b', f: '\f', n: '\n', r: '\r', t: '\t' }

/**
 * The one reader of JSON bodies (RFC 8259), stricter than JSON.parse where a lenient reading
 * would store something other than what was sent: a key given twice in one object, nesting
 * deeper than `maxDepth`, and a lone surrogate escape (`"\ud800"`, which is not text) are
 * refused. Numbers stay exact: see `exactNumber`.
 */
class Reader {
  private at = 0

  constructor (private readonly text: string, private readonly maxDepth: number, private readonly subject: string) {}

  document (): unknown {
    const value = this.value(0)
    this.skipSpace()
    if (this.at < this.text.length) this.fail()
    return value
  }

  private fail (): never {
    throw new JsonError(`${this.subject} is not valid JSON; send a JSON object.`)
  }

  private skipSpace (): void {
    const text = this.text
    let at = this.at
    for (let c = text.charCodeAt(at); c === 32 || c === 10 || c === 13 || c === 9; c = text.charCodeAt(++at));
    this.at = at
  }

  private value (depth: number): unknown {
    this.skipSpace()
    const c = this.text.charCodeAt(this.at)
    if (c === 34) return this.string()
    if (c === 123) return this.object(depth + 1)
    if (c === 91) return this.array(depth + 1)
    if (c === 45 || (c >= 48 && c <= 57)) return this.number()
    if (this.text.startsWith('true', this.at)) { this.at += 4; return true }
    if (this.text.startsWith('false', this.at)) { this.at += 5; return false }
    if (this.text.startsWith('null', this.at)) { this.at += 4; return null }
    return this.fail()
  }

  private checkDepth (depth: number): void {
    if (depth > this.maxDepth) throw new JsonError(`${this.subject} nests arrays and objects deeper than ${this.maxDepth} levels.`)
  }

  private object (depth: number): Record<string, unknown> {
    this.checkDepth(depth)
    this.at++
    const object: Record<string, unknown> = {}
    this.skipSpace()
    if (this.text.charCodeAt(this.at) === 125) { this.at++; return object }
    for (;;) {
      this.skipSpace()
      if (this.text.charCodeAt(this.at) !== 34) this.fail()
      const key = this.string()
      if (Object.hasOwn(object, key)) {
        throw new JsonError(`${this.subject} gives the key ${key.length <= 64 ? JSON.stringify(key) + ' ' : ''}twice in one object; send each key once.`)
      }
      this.skipSpace()
      if (this.text.charCodeAt(this.at++) !== 58) this.fail()
      const value = this.value(depth)
      // An own property, as JSON.parse makes it: assigning `__proto__` would set the prototype.
      if (key === '__proto__') Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true })
      else object[key] = value
      this.skipSpace()
      const next = this.text.charCodeAt(this.at++)
      if (next === 125) return object
      if (next !== 44) this.fail()
    }
  }

  private array (depth: number): unknown[] {
    this.checkDepth(depth)
    this.at++
    const array: unknown[] = []
    this.skipSpace()
    if (this.text.charCodeAt(this.at) === 93) { this.at++; return array }
    for (;;) {
      array.push(this.value(depth))
      this.skipSpace()
      const next = this.text.charCodeAt(this.at++)
      if (next === 93) return array
      if (next !== 44) this.fail()
    }
  }

  /** The index after the digits at `at`; fails unless there is at least one. */
  private digits (at: number): number {
    const text = this.text
    const from = at
    for (let c = text.charCodeAt(at); c >= 48 && c <= 57; c = text.charCodeAt(++at));
    if (at === from) this.fail()
    return at
  }

  private number (): number | bigint {
    const text = this.text
    const start = this.at
    let at = start
    if (text.charCodeAt(at) === 45) at++
    const digitsAt = at
    at = this.digits(at)
    if (text.charCodeAt(digitsAt) === 48 && at - digitsAt > 1) this.fail() // no leading zeros
    let simple = true
    if (text.charCodeAt(at) === 46) {
      at = this.digits(at + 1)
      simple = false
    }
    const e = text.charCodeAt(at)
    if (e === 101 || e === 69) {
      const sign = text.charCodeAt(++at)
      if (sign === 43 || sign === 45) at++
      at = this.digits(at)
      simple = false
    }
    this.at = at
    const literal = text.slice(start, at)
    // Up to 15 digits a plain integer is exact as a double; anything else takes the exact path.
    if (simple && at - digitsAt <= 15) {
      const value = Number(literal)
      return value === 0 ? 0 : value
    }
    return exactNumber(literal)
  }

  private string (): string {
    const text = this.text
    let at = this.at + 1
    let start = at
    let result = ''
    let surrogates = false
    for (;;) {
      const c = text.charCodeAt(at)
      if (c === 34) break
      if (Number.isNaN(c) || c < 32) this.fail()
      if (c >= 0xd800 && c <= 0xdfff) surrogates = true
      if (c === 92) {
        result += text.slice(start, at)
        const escape = text[at + 1]
        if (escape === 'u') {
          const hex = text.slice(at + 2, at + 6)
          if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail()
          const unit = parseInt(hex, 16)
          if (unit >= 0xd800 && unit <= 0xdfff) surrogates = true
          result += String.fromCharCode(unit)
          at += 6
        } else {
          const char = ESCAPES[escape]
          if (char === undefined) this.fail()
          result += char
          at += 2
        }
        start = at
        continue
      }
      at++
    }
    result += text.slice(start, at)
    this.at = at + 1
    // A surrogate is text only as half of a pair; a lone one could not be stored as UTF-8.
    if (surrogates && LONE_SURROGATE.test(result)) {
      throw new JsonError(`${this.subject} holds a lone surrogate (such as "\\ud800"), which is not text; send valid Unicode.`)
    }
    return result
  }
}

/**
 * Parses a JSON text, keeping every number exact (see `exactNumber`). Throws JsonError, whose
 * message says what is wrong, on malformed JSON, a repeated key, excessive nesting or a lone
 * surrogate; the message calls the text `subject`.
 */
export function parseJson (text: string, maxDepth = MAX_DEPTH, subject = 'The request body'): unknown {
  return new Reader(text, maxDepth, subject).document()
}

/**
 * JSON with bigints written as exact integers (ids beyond 2^53, positions), where no schema
 * serializer is at hand. Walks the value rather than marking bigints inside strings, so that no
 * string a client stored can pass for a number.
 */
export function stringifyExact (value: unknown): string {
  if (typeof value === 'bigint') return value.toString()
  if (Array.isArray(value)) return `[${value.map(item => item === undefined ? 'null' : stringifyExact(item)).join(',')}]`
  if (value === null || typeof value !== 'object' || typeof (value as { toJSON?: unknown }).toJSON === 'function') return JSON.stringify(value)
  const fields = Object.entries(value).filter(([, field]) => field !== undefined)
  return `{${fields.map(([key, field]) => `${JSON.stringify(key)}:${stringifyExact(field)}`).join(',')}}`
}
