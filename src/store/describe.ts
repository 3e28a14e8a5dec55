/** A driver's error as one line naming its cause: its code (SQLite's, a SQLSTATE or a socket's) and its message. */
export function describe (error: unknown): string {
  const { code, message } = (error ?? {}) as { code?: unknown, message?: unknown }
  const parts = [code, message].filter(part => typeof part === 'string' && part !== '')
  return parts.length > 0 ? parts.join(': ') : String(error)
}
