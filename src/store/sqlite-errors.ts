/** SQLite's error code (`SQLITE_FULL`, `SQLITE_BUSY_SNAPSHOT`…), or '' for anything else. */
function codeOf (error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  return typeof code === 'string' ? code : ''
}

/** Storage trouble (busy, full, I/O, read-only, cannot open) rather than a bug: answered 503, not 500. */
export function isUnavailable (error: unknown): boolean {
  return /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN|PROTOCOL|NOMEM)/.test(codeOf(error))
}

/** Another connection holds the lock this one needs (an operator's sqlite3 session, a backup). */
export function isBusy (error: unknown): boolean {
  return codeOf(error).startsWith('SQLITE_BUSY')
}
