import { resolve } from 'node:path'
import pino from 'pino'
import { buildApp, workMayRunMs } from './app.js'
import { startPruning } from './changes/retention.js'
import { ConfigError, isPostgresUrl, type Config } from './config.js'
import { logDestination } from './log.js'
import { openStore } from './store/open.js'
import type { PostgresStore } from './store/postgres.js'
import { ALL_SCOPES, type Store } from './store/store.js'
import { digestOf, discards, generateToken } from './tokens.js'
import { endStartSignals } from './start-signals.js'

/**
 * On a store without any token, creates one with every scope and returns it, once; unless no one
 * would `see` it (its banner sent to /dev/null): then none is made, and that is said.
 */
async function bootstrapToken (store: Store, seen: boolean): Promise<{ token: string } | 'unseen' | undefined> {
  // Read first: a store with tokens, the usual start, needs no write (one that could wait, on
  // PostgreSQL, for a synchronous standby that is away: the start would fail for want of it).
  if ((await store.listTokens()).length > 0) return undefined
  if (!seen) return 'unseen'
  const token = generateToken()
  const created = await store.createFirstToken({ name: 'initial', digest: digestOf(token), scopes: ALL_SCOPES })
  return created === undefined ? undefined : { token }
}

function banner (token: string, url: string, databaseUrl: string): string {
  const rule = '='.repeat(78)
  // The absolute path, so that the operator's `plantstore tokens …` can name the same store.
  const database = isPostgresUrl(databaseUrl) ? 'the PostgreSQL database in DATABASE_URL' : resolve(databaseUrl)
  return [
    rule,
    ` plantstore had no tokens in ${database},`,
    ' so it created one with every scope.',
    ' It is shown only this once: keep it now (only its hash is stored).',
    '',
    `   ${token}`,
    '',
    ' First request:',
    `   curl -X POST ${url}/plants -H "Authorization: Bearer ${token}" \\`,
    '     -H "Content-Type: application/json" -d \'{"id": 1, "name": "Fern", "tag": "shade"}\'',
    rule,
    ''
  ].join('\n')
}

/** Why the server could not listen, in one line that says what to change. */
function listenFailure (error: unknown, config: Config): ConfigError {
  const where = `${config.host}:${config.port}`
  const reasons: Record<string, string> = {
    EADDRINUSE: `Cannot listen on ${where}: the port is already in use; stop what uses it or choose another PORT.`,
    EADDRNOTAVAIL: `Cannot listen on ${where}: this machine has no such address; choose another HOST.`,
    EACCES: `Cannot listen on ${where}: permission denied (ports below 1024 need privileges); choose another PORT.`,
    ENOTFOUND: `Cannot listen on ${where}: the host name "${config.host}" does not resolve; set HOST to an address or a known name.`,
    EAI_AGAIN: `Cannot listen on ${where}: the host name "${config.host}" could not be resolved now; set HOST to an address.`
  }
  const code = (error as NodeJS.ErrnoException).code ?? ''
  return new ConfigError(reasons[code] ?? `Cannot listen on ${where}: ${(error as Error).message}.`)
}

/**
 * Opens the store, listens, and closes gracefully on SIGTERM or SIGINT (exit 0). The caller holds
 * those signals while the server starts (stopOnSignalsWhileStarting, before this module loads).
 */
export async function serve (config: Config): Promise<void> {
  const store = await openStore(config.databaseUrl)
  await store.ping()
  // Its last lines go out at exit, whichever way the process ends.
  const log = pino({ level: config.logLevel }, logDestination())
  if (isPostgresUrl(config.databaseUrl)) {
    (store as PostgresStore).onSearch = (event) => {
      if ('lost' in event) log.warn({ host: event.lost }, 'database: host lost or no longer taking writes; looking for the one to write to (503 meanwhile)')
      else if ('slow' in event) log.warn({ host: event.slow }, 'database: a statement got no answer in time; looking for the host to write to (served meanwhile)')
      else log.info({ host: event.found, ms: event.ms }, 'database: writing to this host')
    }
  }
  const app = await buildApp({ config, store, log })
  try {
    await app.listen({ port: config.port, host: config.host })
  } catch (error) {
    await app.close()
    await store.close()
    throw listenFailure(error, config)
  }
  const address = app.server.address()
  const url = typeof address === 'object' && address !== null
    ? `http://${address.family === 'IPv6' ? `[${address.address}]` : address.address}:${address.port}`
    : `http://${config.host}:${config.port}`
  // The change log's retention: a job of the process beside the requests, on the same store.
  const pruning = startPruning({ store, retentionMs: config.changesRetentionMs, log })
  log.info(`Server listening at ${url}`) // Fastify's own words, which scripts may already watch for

  const fail = (error: unknown): void => {
    log.error({ err: error }, 'shutdown failed')
    process.exit(1)
  }
  let closing = false
  const shutdown = async (signal: string): Promise<void> => {
    if (closing) {
      log.info({ signal }, 'already stopping')
      return
    }
    closing = true
    const signalled = Date.now()
    const deadline = config.shutdownTimeout * 1000
    log.info({ signal, shutdownTimeoutS: config.shutdownTimeout }, 'stopping: no new connections, finishing requests in flight')
    // Requests in flight may run until a second before the deadline; then every connection is
    // closed, whatever its client is doing, so that the commit and the exit fit in the last second.
    const cutOff = setTimeout(() => {
      log.warn('shutdown deadline: closing the connections still open')
      app.server.closeAllConnections()
    }, workMayRunMs(deadline))
    const giveUp = setTimeout(() => fail(new Error(`did not stop within SHUTDOWN_TIMEOUT (${config.shutdownTimeout} s)`)), deadline)
    // Node closes the connections that are idle when the server closes, not those that fall idle
    // later (a request in flight, answered): without this they would hold the exit until cutOff.
    const idle = setInterval(() => app.server.closeIdleConnections(), 100)
    await app.close() // stops accepting, closes idle connections, waits for requests in flight
    clearInterval(idle)
    clearTimeout(cutOff)
    // The server's close comes before the closes of the connections cut at the deadline, which end
    // their requests (and write their log lines) once libuv has closed them, later in this turn.
    await new Promise(resolve => setTimeout(resolve, 0))
    await pruning.stop()
    // Commits and syncs what it holds and checkpoints the WAL into the .db, waiting for a lock or a
    // sync no later than half a second before the deadline: the exit is still 0 and on time.
    const left = await store.close(deadline - (Date.now() - signalled) - 500)
    if (left !== undefined) log.warn(`stopped; ${left}`)
    clearTimeout(giveUp)
    process.exit(0)
  }
  // `on`, not `once`: a second signal (Ctrl-C reaches both npm and the server; an impatient
  // supervisor repeats itself) must not fall back to Node's default, which kills mid-commit.
  // The shutdown already under way keeps its deadline.
  process.on('SIGTERM', () => { shutdown('SIGTERM').catch(fail) })
  process.on('SIGINT', () => { shutdown('SIGINT').catch(fail) })
  endStartSignals()

  // Only now: a start that cannot listen must not use up the one token shown to a newcomer. A stop
  // that comes meanwhile closes the store under it: then no token is made, and that is no failure.
  // Nor is one made for a banner no one would see (stderr to /dev/null): a later start shows it.
  const token = await bootstrapToken(store, !discards(2)).catch((error: unknown) => { if (closing) return undefined; throw error })
  if (token === 'unseen') log.warn('stderr goes to /dev/null, where no one would see the first token: none was made (make one with plantstore tokens create, or start once with stderr shown)')
  else if (token !== undefined) process.stderr.write(banner(token.token, url, config.databaseUrl))
}
