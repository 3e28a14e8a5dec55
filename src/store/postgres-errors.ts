/** PostgreSQL's SQLSTATE (`23505`, `08006`…), or '' for an error without one. */
export function sqlstateOf (error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : ''
}

/** A unique violation: from any path, a conflict rather than a failure. */
export function isUniqueViolation (error: unknown): boolean {
  return sqlstateOf(error) === '23505'
}

/**
 * The database cannot answer now, rather than a bug: answered 503, not 500. The host is lost
 * (isHostLost), 57014 (a statement timeout), class 53 (too many connections, out of memory or
 * disk), serialization failures and deadlocks (40001, 40P01: a retry succeeds). And the database
 * refusing this service, which its operator undoes: class 28 (the role may not log in, a wrong
 * password), 3D000 (no such database: renamed or dropped), 57P04 (dropped meanwhile), class 55
 * (a database not accepting connections, a lock not available), 42501 (a privilege revoked).
 */
export function isUnavailable (error: unknown): boolean {
  const state = sqlstateOf(error)
  return isHostLost(error) || isPoolBusy(error) || /^(53|28|55)/.test(state) || ['57014', '40001', '40P01', '3D000', '57P04', '42501'].includes(state)
}

/** node-postgres gave up waiting for a statement's answer (query_timeout): the session may still be running it. */
export function isQueryTimeout (error: unknown): boolean {
  return (error as { message?: unknown } | null)?.message === 'Query read timeout'
}

/** The pool had no connection free within the deadline: the process is busy, not the host lost. */
function isPoolBusy (error: unknown): boolean {
  return (error as { message?: unknown } | null)?.message === 'timeout exceeded when trying to connect'
}

/**
 * The host may no longer be the one to write to: SQLSTATE class 08 (connection exception),
 * 57P01–57P03 (the server shuts down or cannot take connections yet), 25006 (a read-only
 * transaction: a standby, or a primary demoted); without a SQLSTATE, the socket's and
 * node-postgres's own connection failures (refused, reset, lost, timed out). The store then
 * looks for the primary again (SPEC section 10).
 */
export function isHostLost (error: unknown): boolean {
  const state = sqlstateOf(error)
  if (state !== '') return /^08/.test(state) || ['57P01', '57P02', '57P03', '25006'].includes(state)
  const code = (error as { code?: unknown } | null)?.code
  if (typeof code === 'string' && /^(ECONN|ETIMEDOUT|EPIPE|EHOSTUNREACH|ENETUNREACH|ENOTFOUND|EAI_AGAIN)/.test(code)) return true
  const message = (error as { message?: unknown } | null)?.message
  return typeof message === 'string' &&
    /Connection terminated|Query read timeout|Client was closed|Client has encountered a connection error|Cannot use a pool after calling end/.test(message)
}
