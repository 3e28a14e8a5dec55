import type pg from 'pg'
import { StoreUnavailableError } from '../errors.js'

/**
 * COMMIT on `client`, answering only when the commit is known to be durable as configured. A
 * COMMIT that fails, or a connection lost while it is under way, rejects (503: the outcome is
 * unknown; an identical retry tells the truth). So does one during which PostgreSQL warned:
 * a wait for synchronous replication cancelled (by a statement timeout, a cancel, a shutdown)
 * commits locally with a WARNING (SQLSTATE class 01) or a 57P01 notice, and PostgreSQL then
 * answers COMMIT as if all were well, with the change possibly not on the standby.
 */
const COMMIT_UNKNOWN = Symbol('plantstore.commitOutcomeUnknown')

/** True for an error thrown by a COMMIT under way (commit): whether it committed is unknown. */
export function duringCommit (error: unknown): boolean {
  return (error as { [COMMIT_UNKNOWN]?: boolean } | null)?.[COMMIT_UNKNOWN] === true
}

export async function commit (client: pg.ClientBase): Promise<void> {
  let warning: string | undefined
  const listen = (notice: { code?: string, message?: string, detail?: string }): void => {
    if (/^(01|57P01)/.test(notice.code ?? '')) warning ??= [notice.message, notice.detail].filter(Boolean).join(' ')
  }
  client.on('notice', listen)
  try {
    await client.query('COMMIT')
  } catch (error) {
    // Thrown as it is, so that the store still tells a host lost from it; marked so that the
    // store's answer (failureOf) says the outcome is unknown.
    if (error instanceof Error) (error as Error & { [COMMIT_UNKNOWN]?: boolean })[COMMIT_UNKNOWN] = true
    throw error
  } finally {
    client.off('notice', listen)
  }
  if (warning !== undefined) throw new StoreUnavailableError(`The commit's outcome is unknown (${warning}).`, 'unavailable', true)
}
