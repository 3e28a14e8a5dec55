import { hash, randomBytes } from 'node:crypto'
import { fstatSync, statSync } from 'node:fs'
import { ALL_SCOPES, type Scope } from './store/store.js'

/** How long a server may answer from a token lookup it made; `tokens revoke` waits this out. */
export const TOKEN_CACHE_MS = 1000

/** Tokens read `pst_` + 43 base64url characters: 256 random bits. */
const TOKEN_PREFIX = 'pst_'
const TOKEN_SHAPE = new RegExp(`^${TOKEN_PREFIX}[A-Za-z0-9_-]{43}$`)

/**
 * True when `fd` writes to /dev/null: given so (`> /dev/null`), or closed (Node then opens
 * /dev/null in its place). A token written there, shown only once, would be shown to no one.
 */
export function discards (fd: number): boolean {
  try {
    const target = fstatSync(fd)
    return target.isCharacterDevice() && target.rdev === statSync('/dev/null').rdev
  } catch {
    return false
  }
}

/** A new secret token. It is shown once; only its digest is stored. */
export function generateToken (): string {
  return TOKEN_PREFIX + randomBytes(32).toString('base64url')
}

/** The SHA-256 digest under which a token is stored and looked up. */
export function digestOf (token: string): Buffer {
  return hash('sha256', token, 'buffer')
}

/** True when `text` has the shape of a token; anything else is refused without a lookup. */
export function looksLikeToken (text: string): boolean {
  return TOKEN_SHAPE.test(text)
}

export function isScope (text: string): text is Scope {
  return (ALL_SCOPES as string[]).includes(text)
}

const UNITS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }

/** Ten years, as long as ten calendar years can be: 3653 days (three of them leap years), or 521 weeks and 6 days. */
export const TEN_YEARS_MS = 3653 * UNITS.d

/** Parses a lifetime such as `30d`, `12h`, `15m`, `90s` or `2w` into milliseconds; undefined if malformed. */
export function parseDuration (text: string): number | undefined {
  const match = /^(\d+)([smhdw])$/.exec(text) // however many digits: a bound is the caller's, and its message
  if (match === null || Number(match[1]) === 0) return undefined
  return Number(match[1]) * UNITS[match[2]]
}

/**
 * Token names are 1 to 64 of `[A-Za-z0-9._-]`, so that `tokens list` stays one token a line
 * and tab-separated, and never all digits, so that `tokens revoke NAME_OR_ID` cannot mistake
 * a name for an id.
 */
export function isTokenName (text: string): boolean {
  return /^[A-Za-z0-9._-]{1,64}$/.test(text) && !/^\d+$/.test(text)
}
