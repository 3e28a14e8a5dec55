import cluster, { type Worker } from 'node:cluster'
import pino from 'pino'
import type { Config } from './config.js'
import { answerMetricsRequests, FORKED_BY_PLANTSTORE } from './metrics/cluster.js'
import { openStore } from './store/open.js'
import { endStartSignals } from './start-signals.js'

/** A worker that dies sooner than this after its start is a crash loop: each such death doubles the wait. */
const STEADY_MS = 10_000
const FIRST_RESTART_MS = 100
const MAX_RESTART_MS = 10_000

/**
 * `plantstore serve --workers N` (PostgreSQL only): this process, the primary, opens the database
 * once (creating or migrating its schema, so that a bad DATABASE_URL fails here in one line, not
 * in N workers), then runs N copies of the server that share the port: node:cluster hands each
 * new connection to the next worker. The first worker starts alone, so that a port already taken
 * is one line and exit 1; the rest follow once it listens. A worker that dies is replaced. SIGTERM
 * or SIGINT is passed on to every worker, which stops as a single server does; the primary exits
 * 0 once all have stopped cleanly within SHUTDOWN_TIMEOUT.
 */
export async function serveWorkers (config: Config): Promise<void> {
  await (await openStore(config.databaseUrl)).close()
  const log = pino({ level: config.logLevel }, pino.destination({ dest: 1, sync: true }))

  let started = false
  let stopping: NodeJS.Signals | undefined
  let clean = true
  let quickDeaths = 0
  const startedAt = new Map<Worker, number>()
  const restarts = new Set<NodeJS.Timeout>()
  // A worker that has exited may stay in cluster.workers until its IPC channel closes.
  const live = (): Worker[] => Object.values(cluster.workers ?? {}).filter((worker): worker is Worker => worker !== undefined && !worker.isDead())

  const fork = (): Worker => {
    const worker = cluster.fork({ [FORKED_BY_PLANTSTORE]: '1' })
    startedAt.set(worker, Date.now())
    worker.on('error', (error: Error) => log.warn({ workerPid: worker.process.pid, err: error }, 'worker process error'))
    return worker
  }

  const restart = (worker: Worker, code: number | null, signal: string | null): void => {
    quickDeaths = Date.now() - (startedAt.get(worker) ?? 0) < STEADY_MS ? quickDeaths + 1 : 0
    startedAt.delete(worker)
    const delay = Math.min(FIRST_RESTART_MS * 2 ** quickDeaths, MAX_RESTART_MS)
    log.warn({ workerPid: worker.process.pid, code, signal, restartInMs: delay }, 'worker exited unexpectedly; starting another')
    const timer = setTimeout(() => {
      restarts.delete(timer)
      fork()
    }, delay)
    restarts.add(timer)
  }

  cluster.on('exit', (worker, code, signal) => {
    if (stopping !== undefined) {
      // Killed by the signal itself, a worker was still starting: it had no handlers yet.
      if (code !== 0 && signal !== stopping) clean = false
      if (live().length === 0) process.exit(clean ? 0 : 1)
    } else if (!started) {
      process.exit(code ?? 1) // the first worker could not start, and said why on stderr
    } else {
      restart(worker, code, signal)
    }
  })

  const stop = (signal: NodeJS.Signals): void => {
    if (stopping !== undefined) {
      log.info({ signal }, 'already stopping')
      return
    }
    stopping = signal
    for (const timer of restarts) clearTimeout(timer)
    const workers = live()
    log.info({ signal, workers: workers.length }, 'stopping: the signal is passed on to every worker')
    if (workers.length === 0) process.exit(0)
    for (const worker of workers) worker.process.kill(signal)
    setTimeout(() => {
      const left = live()
      log.error({ workerPids: left.map(worker => worker.process.pid) }, `workers still running after SHUTDOWN_TIMEOUT (${config.shutdownTimeout} s): killed`)
      for (const worker of left) worker.process.kill('SIGKILL')
      process.exit(1)
    }, config.shutdownTimeout * 1000)
  }
  // `on`, not `once`: a second signal must not fall back to Node's default and orphan the workers.
  process.on('SIGTERM', () => stop('SIGTERM'))
  process.on('SIGINT', () => stop('SIGINT'))
  endStartSignals()
  answerMetricsRequests()

  const first = fork()
  await new Promise(resolve => first.once('listening', resolve))
  started = true
  if (stopping !== undefined) return
  for (let i = 1; i < config.workers; i++) fork()
  log.info({ workers: config.workers }, `serving with ${config.workers} worker processes`)
}
