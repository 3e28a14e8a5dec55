// Several PostgreSQL hosts in one DATABASE_URL, the way libpq takes them (SPEC section 10):
// `postgres://u@h1:5432,h2:5433/db?target_session_attrs=primary`. node-postgres connects to one
// host; this module splits the URL into one per host and finds the one to write to.
import pg from 'pg'
import { quoted } from '../config.js'

/** Which host a session may use, as libpq's `target_session_attrs`: `primary` (not in recovery), `read-write` (not read-only), `any`. */
export type TargetSession = 'primary' | 'read-write' | 'any'

export interface DatabaseHosts {
  /** One URL per host, in the order given: each the whole URL with that host alone, `target_session_attrs` left out. */
  urls: string[]
  /** Several hosts take `read-write` unless asked for `primary`: the service writes (`any` among several would take a standby that answers first). One host takes `any`, as today. */
  target: TargetSession
}

const TARGETS: TargetSession[] = ['primary', 'read-write', 'any']
/**
 * libpq's sslmodes that node-postgres implements: not `allow` (no SSL first, then SSL); `prefer`
 * is taken, but node-postgres does not fall back to a connection without SSL as libpq does.
 */
const SSL_MODES = ['disable', 'prefer', 'require', 'verify-ca', 'verify-full']

/** The hosts of `url` and the session they must offer; a URL libpq would take and this cannot throws, naming what is wrong (never the password). */
export function databaseHosts (url: string): DatabaseHosts {
  // The authority ends at the first '/' (a password holding '/', '?' or '#' must be percent-encoded
  // anyway); the user info at its last '@', since a password may hold one.
  const match = /^(postgres(?:ql)?:\/\/)([^/]*)(.*)$/.exec(url)
  if (match === null) throw new Error('DATABASE_URL is not a postgres:// URL.')
  const [, scheme, authority, rest] = match
  const at = authority.lastIndexOf('@')
  const userInfo = at === -1 ? undefined : authority.slice(0, at)
  const hostList = authority.slice(at + 1)
  // No host name holds a comma (an IPv6 address is in brackets, its colons apart from the port's).
  const hosts = hostList.split(',')
  if (hosts.some(host => !/^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]*)(:\d{1,5})?$/.test(host)) || (hosts.length > 1 && hosts.some(host => host === ''))) {
    throw new Error('DATABASE_URL\'s hosts are not host[:port][,host[:port]…] (a password holding "/", "?" or "#" must be percent-encoded).')
  }
  const query = new URLSearchParams(/\?([^#]*)/.exec(rest)?.[1] ?? '')
  const asked = query.get('target_session_attrs')
  if (asked !== null && !TARGETS.includes(asked as TargetSession)) {
    throw new Error(`DATABASE_URL's target_session_attrs is ${quoted(asked)}; the service writes, so it takes ${TARGETS.join(', ')}.`)
  }
  // libpq's other way to name hosts, `?host=…`, overrides the authority: node-postgres reads it
  // for one host (a Unix socket's directory, as often as not); beside several, the hosts the
  // search would try would not be where the connections go, so they are named once, above. One
  // `port=` applies to every host, in libpq and here alike; a list of them would not.
  if ((query.has('host') && hosts.length > 1) || query.get('host')?.includes(',') === true || query.get('port')?.includes(',') === true) {
    throw new Error('DATABASE_URL names several hosts with host= or port= in its query: name them in the URL itself, postgres://user@h1:5432,h2:5432/db.')
  }
  const sslmode = query.get('sslmode')
  if (sslmode !== null && query.get('uselibpqcompat') !== 'false' && !SSL_MODES.includes(sslmode)) {
    throw new Error(`DATABASE_URL's sslmode is ${quoted(sslmode)}; the service takes ${SSL_MODES.join(', ')}.`)
  }
  // The other parameters pass as they were written, for node-postgres to read. Its sslmode takes
  // libpq's meaning (require: encrypted, the certificate unchecked) only when asked to; otherwise
  // it reads require as verify-full and prints a warning of many lines at every start.
  const path = rest.replace(/[?#].*/, '')
  const params = (/\?([^#]*)/.exec(rest)?.[1] ?? '').split('&').filter(pair => pair !== '' && !pair.startsWith('target_session_attrs='))
  if (query.has('sslmode') && !query.has('uselibpqcompat')) params.push('uselibpqcompat=true')
  const kept = params.join('&')
  const urls = hosts.map(host => `${scheme}${userInfo === undefined ? '' : `${userInfo}@`}${host}${path}${kept === '' ? '' : `?${kept}`}`)
  const target = (asked as TargetSession | null) ?? 'any'
  return { urls, target: urls.length > 1 && target === 'any' ? 'read-write' : target }
}

/** The host:port part of a one-host URL, for log lines and errors (never the user or password). */
export function hostOf (url: string): string {
  const authority = /^postgres(?:ql)?:\/\/([^/]*)/.exec(url)?.[1] ?? ''
  return authority.slice(authority.lastIndexOf('@') + 1) || 'localhost'
}

/**
 * Whether the session on `client` is one `target` takes: a host in recovery (a standby) is not
 * `primary`; a read-only one (a standby, or `default_transaction_read_only`) is not `read-write`.
 * Answers why not, or undefined when it is.
 */
export async function sessionRefusal (client: pg.ClientBase, target: TargetSession): Promise<string | undefined> {
  if (target === 'any') return undefined
  if (target === 'primary') {
    const { rows: [{ recovery }] } = await client.query<{ recovery: boolean }>('SELECT pg_is_in_recovery() AS recovery')
    return recovery ? 'is in recovery (a standby)' : undefined
  }
  const { rows: [{ transaction_read_only: readOnly }] } = await client.query<{ transaction_read_only: string }>('SHOW transaction_read_only')
  return readOnly === 'on' ? 'is read-only' : undefined
}
