import { isIP } from 'node:net'
import { parseDuration, TEN_YEARS_MS } from './tokens.js'

/** Everything the server reads from its environment, parsed once at start. */
export interface Config {
  /** TCP port to listen on. Default 8080; 0 picks a free port. */
  port: number
  /** Address to listen on. Default 127.0.0.1 (loopback only). */
  host: string
  /** A postgres:// URL, or a SQLite file path. Default ./data/plantstore.db. */
  databaseUrl: string
  /** pino level: fatal, error, warn, info, debug, trace or silent. Default info. */
  logLevel: string
  /** Requests per token per minute; 0 turns the limit off. Default 60000. */
  rateLimitPerMinute: number
  /** Seconds a request's headers and body may take to arrive before it is answered 408. Default 10. */
  requestTimeout: number
  /** Seconds from SIGTERM to exit, whatever clients do; requests in flight get that long to finish. Default 10. */
  shutdownTimeout: number
  /** Server processes sharing the port (PostgreSQL only above 1). Default 1: this process serves. */
  workers: number
  /** Browser origins answered with CORS headers, exactly as browsers send them (https://garden.example:8443). Default none: CORS off. */
  corsOrigins: string[]
  /** How long the change log keeps a change, in ms (`90s`, `15m`, `12h`, `7d`, `2w`). Default 7d. */
  changesRetentionMs: number
  /** Change streams open and long polls waiting, together, at most; past it they are answered 503. Default 1000. */
  changesMaxReaders: number
  /** Webhook URLs on loopback, private, link-local and metadata addresses are taken too: for local tests only. Default false. */
  webhooksAllowPrivate: boolean
  /** Webhook attempts in flight in this process at most (one subscription: a quarter of it, at least 1). Default 64. */
  webhooksMaxInFlight: number
  /** Seconds a webhook receiver has to answer. Default 15. */
  webhooksTimeout: number
}

/** A configuration value that cannot be used: the message is the one line shown at start. */
export class ConfigError extends Error {}

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']

function integer (name: string, text: string, min: number, max: number): number {
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new ConfigError(`${name} must be a whole number from ${min} to ${max}, not ${quoted(text)}.`)
  }
  return Number(text)
}

/** `cause` as the end of a sentence: one full stop, whether or not the cause brought its own. */
export const ending = (cause: string): string => `${cause.replace(/\.$/, '')}.`

/** Quotes text given from outside (a setting, an argument) for a message, so that a tab or a line break cannot split its line. */
export function quoted (text: string): string {
  return JSON.stringify(text)
}

/** A comma-separated list of origins, each written as browsers send it in `Origin`: that is what is matched, exactly. */
function origins (text: string): string[] {
  if (text === '') return []
  return text.split(',').map(part => {
    const origin = part.trim()
    let url: URL | undefined
    try {
      url = new URL(origin)
    } catch {}
    if (url === undefined || !['http:', 'https:'].includes(url.protocol) || url.origin !== origin) {
      throw new ConfigError(`CORS_ORIGINS must be origins separated by commas, each a scheme, a host and a port only if not the default, in lower case, without path or trailing slash (https://garden.example, http://localhost:3000), not ${quoted(origin)}.`)
    }
    return origin
  })
}

/** One row per setting: the environment variable, its default, and how its text is read. */
const table = {
  port: { env: 'PORT', fallback: '8080', parse: (t: string) => integer('PORT', t, 0, 65535) },
  host: {
    env: 'HOST',
    fallback: '127.0.0.1',
    parse: (t: string) => {
      if (t === '' || /\s/.test(t) || (t.includes(':') && isIP(t) === 0)) throw new ConfigError(`HOST must be an address or host name, not ${quoted(t)}.`)
      return t
    }
  },
  databaseUrl: {
    env: 'DATABASE_URL',
    fallback: './data/plantstore.db',
    parse: (t: string) => {
      if (t === '') throw new ConfigError('DATABASE_URL must be a postgres:// URL or a SQLite file path, not empty.')
      // Most likely a stray space from a copy or a quote: not a name to make files by.
      if (t.trim() !== t) throw new ConfigError('DATABASE_URL begins or ends with white space; remove it (a file whose name does is written with a directory before it: ./" name").')
      // Never a path anyone means, and one that would split every line that names it. Not quoted: it may hold a password.
      // eslint-disable-next-line no-control-regex -- control characters are what it looks for
      if (/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/.test(t)) throw new ConfigError('DATABASE_URL holds a control character (a line break, a tab); remove it.')
      // A URL of another scheme or a mistyped one (`postgres:/`, `postgres:user@host`, Prisma's
      // `file:dev.db`, another database) would otherwise become a new SQLite file with a new first
      // token: any `scheme:/` (of two characters at least: `C:` is no scheme), and a database's or a
      // file's scheme without the slash (a name such as `data:2024.db` stays a name). Only the
      // scheme is named: the rest may hold a password.
      const scheme = /^([A-Za-z][A-Za-z0-9+.-]+):\//.exec(t)?.[1] ?? /^(postgres(?:ql)?|file|sqlite3?|mysql|mariadb|mongodb|redis|jdbc):/i.exec(t)?.[1]
      if (scheme !== undefined && !isPostgresUrl(t)) {
        throw new ConfigError(`DATABASE_URL begins as a ${scheme}: URL, but only postgres:// and postgresql:// (in lower case) select a database server; a SQLite file whose path begins so is written ./${scheme}:….`)
      }
      // SQLite's name for a database in memory: it would keep nothing, and no token outlives a command.
      if (t === ':memory:') throw new ConfigError('DATABASE_URL must be a postgres:// URL or a SQLite file path; ":memory:" is SQLite\'s name for a database in memory, which keeps nothing (a file named so is written ./:memory:).')
      return t
    }
  },
  logLevel: {
    env: 'LOG_LEVEL',
    fallback: 'info',
    parse: (t: string) => {
      if (!LOG_LEVELS.includes(t)) throw new ConfigError(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')}, not ${quoted(t)}.`)
      return t
    }
  },
  rateLimitPerMinute: { env: 'RATE_LIMIT_PER_MINUTE', fallback: '60000', parse: (t: string) => integer('RATE_LIMIT_PER_MINUTE', t, 0, 1e9) },
  requestTimeout: { env: 'REQUEST_TIMEOUT', fallback: '10', parse: (t: string) => integer('REQUEST_TIMEOUT', t, 1, 3600) },
  shutdownTimeout: { env: 'SHUTDOWN_TIMEOUT', fallback: '10', parse: (t: string) => integer('SHUTDOWN_TIMEOUT', t, 1, 3600) },
  // A fixed bound, the same on every machine: far past any useful count, short of a typo's 1000.
  workers: { env: 'WORKERS', fallback: '1', parse: (t: string) => integer('WORKERS', t, 1, 64) },
  corsOrigins: { env: 'CORS_ORIGINS', fallback: '', parse: origins },
  changesRetentionMs: {
    env: 'CHANGES_RETENTION',
    fallback: '7d',
    parse: (t: string) => {
      const ms = parseDuration(t)
      if (ms === undefined || ms > TEN_YEARS_MS) throw new ConfigError(`CHANGES_RETENTION must be a duration such as 7d, 12h, 30m or 90s (up to 10 years), not ${quoted(t)}.`)
      return ms
    }
  },
  changesMaxReaders: { env: 'CHANGES_MAX_READERS', fallback: '1000', parse: (t: string) => integer('CHANGES_MAX_READERS', t, 0, 100_000) },
  webhooksAllowPrivate: {
    env: 'WEBHOOKS_ALLOW_PRIVATE',
    fallback: 'false',
    parse: (t: string) => {
      if (t !== 'true' && t !== 'false') throw new ConfigError(`WEBHOOKS_ALLOW_PRIVATE must be true or false, not ${quoted(t)}.`)
      return t === 'true'
    }
  },
  webhooksMaxInFlight: { env: 'WEBHOOKS_MAX_IN_FLIGHT', fallback: '64', parse: (t: string) => integer('WEBHOOKS_MAX_IN_FLIGHT', t, 1, 10_000) },
  webhooksTimeout: { env: 'WEBHOOKS_TIMEOUT', fallback: '15', parse: (t: string) => integer('WEBHOOKS_TIMEOUT', t, 1, 300) }
} as const

/** The environment variable behind each setting, for help texts and `serve` flags. */
export const settings = Object.entries(table).map(([key, row]) => ({ key: key as keyof Config, env: row.env }))

/**
 * Reads the configuration from `env`, with `overrides` (from command-line flags) taking precedence.
 * Throws a ConfigError naming the first bad value.
 */
export function loadConfig (env: NodeJS.ProcessEnv = process.env, overrides: Partial<Record<keyof Config, string>> = {}): Config {
  const config: Record<string, unknown> = {}
  for (const [key, row] of Object.entries(table)) {
    const text = overrides[key as keyof Config] ?? env[row.env] ?? row.fallback
    config[key] = row.parse(text)
  }
  const parsed = config as unknown as Config
  if (parsed.workers > 1 && !isPostgresUrl(parsed.databaseUrl)) {
    throw new ConfigError(`WORKERS is ${parsed.workers}, but a SQLite store has one writer: run one process (WORKERS=1), or use PostgreSQL (a postgres:// DATABASE_URL) for several.`)
  }
  return parsed
}

/** True when the URL selects the PostgreSQL backend. */
export function isPostgresUrl (url: string): boolean {
  return /^postgres(ql)?:\/\//.test(url)
}
