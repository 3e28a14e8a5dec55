import { connect } from 'node:net'
import type pg from 'pg'

/** The protocol's CancelRequest code (PostgreSQL's frontend/backend protocol, "Canceling Requests in Progress"). */
const CANCEL_REQUEST_CODE = 80877102

/** How long a cancel may take to reach the server; past it, it is given up (the host is gone). */
const CANCEL_TIMEOUT_MS = 2000

/**
 * Asks the server to cancel the statement `client`'s session is running, on a connection of its
 * own: the protocol's CancelRequest, which needs no login and no connection slot (it is taken
 * past max_connections too). For a session given up on while its statement still runs: an
 * autocommit write (the rate limit's counts, the log's pruning) whose implicit commit waits for a
 * synchronous standby that is away goes on waiting after its client has gone, since PostgreSQL
 * does not look at the client meanwhile, and each such session would hold a connection slot until
 * the standby returns. Cancelled, the wait ends (committed on the primary alone, with a warning no
 * one reads: bookkeeping that a failover may take back harmlessly) and the session sees its client
 * gone. Never a transaction's COMMIT, which is waited for (postgres-commit.ts). Best effort: a
 * host that is gone is not asked.
 */
export function cancelStatement (client: pg.Client): void {
  const { processID, secretKey } = client as pg.Client & { processID: number | null, secretKey: number | null }
  if (processID === null || secretKey === null) return
  const request = Buffer.alloc(16)
  request.writeInt32BE(16, 0)
  request.writeInt32BE(CANCEL_REQUEST_CODE, 4)
  request.writeInt32BE(processID, 8)
  request.writeInt32BE(secretKey, 12)
  const socket = client.host.startsWith('/') ? connect(`${client.host}/.s.PGSQL.${client.port}`) : connect(client.port, client.host)
  socket.on('error', () => {})
  socket.setTimeout(CANCEL_TIMEOUT_MS, () => socket.destroy())
  socket.end(request)
}
