import { parse as parseLossless } from 'lossless-json'

// JSON.parse is exact for integers of up to 15 digits; anything else that looks numeric
// (a longer digit run, a fraction, an exponent) takes the exact path.
const MIGHT_LOSE_PRECISION = /\d{16}|\d[.eE]/
const LITERAL = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/

/**
 * The exact value of a JSON number literal: a number when that is exact, a bigint for an
 * integer beyond 2^53. A non-integer whose nearest double is an integer (1e-400, 2^60 + 0.5)
 * becomes NaN, so that no integer check can mistake it for one.
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
  // Beyond 2^53: exact as a bigint. An exponent this large is far outside int64 anyway.
  if (exponent > 400) return value
  return BigInt(sign + (exponent >= 0 ? digits + '0'.repeat(exponent) : digits.slice(0, exponent)))
}

/** Parses a JSON text, keeping every number exact (see `exactNumber`). Throws SyntaxError. */
export function parseJson (text: string): unknown {
  if (!MIGHT_LOSE_PRECISION.test(text)) return JSON.parse(text)
  return parseLossless(text, null, exactNumber)
}
