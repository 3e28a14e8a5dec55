import type pg from 'pg'
import { StoreUnavailableError } from '../errors.js'

/**
 * How long the COMMIT's reply is waited for: the longest a timer waits (about 24.8 days), none in
 * effect. A COMMIT waiting for a synchronous standby that is away must not be given up on and
 * cancelled (PostgreSQL lifts the statement timeout for it): cancelled, PostgreSQL ends the wait by
 * making the commit visible on the primary alone, and a promotion of that standby then loses a
 * change that readers saw and gives its position to another (SPEC section 9). Left waiting, the
 * commit stays unseen until the standby has it, or is lost with the primary, unseen. Its
 * connection is closed by a stop (the store's close) or a move to another host (search), which
 * also bound a wait for a host gone silent under it.
 */
const COMMIT_REPLY_TIMEOUT_MS = 2 ** 31 - 1

const COMMIT_UNKNOWN = Symbol('plantstore.commitOutcomeUnknown')

/** True for an error thrown by a COMMIT under way (commit): whether it committed is unknown. */
export function duringCommit (error: unknown): boolean {
  return (error as { [COMMIT_UNKNOWN]?: boolean } | null)?.[COMMIT_UNKNOWN] === true
}

/**
 * COMMIT on `client`, answering only when the commit is known to be durable as
 * configured. A COMMIT that fails, or a connection lost while it is under way, rejects (503: the
 * outcome is unknown; an identical retry tells the truth). So does one during which PostgreSQL
 * warned: a wait for synchronous replication cancelled (by someone else's cancel, a shutdown)
 * commits locally with a WARNING (SQLSTATE class 01) or a 57P01 notice, and PostgreSQL then
 * answers COMMIT as if all were well, with the change possibly not on the standby.
 */
export async function commit (client: pg.ClientBase): Promise<void> {
  let warning: string | undefined
  const listen = (notice: { code?: string, message?: string, detail?: string }): void => {
    if (/^(01|57P01)/.test(notice.code ?? '')) warning ??= [notice.message, notice.detail].filter(Boolean).join(' ')
  }
  client.on('notice', listen)
  try {
    // node-postgres reads a query's own `query_timeout`, which its types leave out.
    await client.query({ text: 'COMMIT', query_timeout: COMMIT_REPLY_TIMEOUT_MS } as pg.QueryConfig)
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
