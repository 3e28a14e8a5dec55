import cluster from 'node:cluster'
import pino from 'pino'

/** The most bytes Linux writes to a pipe at once, never split (POSIX guarantees at least 512). */
const PIPE_BUF = 4096
/** The most bytes handed to stdout in one write by a process that has it to itself. */
const MAX_WRITE = 16 * 1024

/** The log's destination: pino writes its lines here. */
export interface LogDestination {
  write: (line: string) => void
}

/**
 * The service's log on stdout. The lines logged in one turn of the event loop are joined and
 * written once the turn is over, in one write: under load a request's line costs an append to a
 * string, not a write of its own (an asynchronous write per line went through libuv's thread
 * pool at ~30 µs of CPU each: the access log was a sixth of a POST, docs/performance.md). The
 * write is synchronous, as pino's default is: a reader of stdout that stops makes the service
 * wait for it rather than buffer without bound. Workers share one stdout: a write of whole lines,
 * at most PIPE_BUF bytes, is never interleaved with another process's on a pipe, so a batch never
 * grows past that.
 */
export function logDestination (): LogDestination {
  const maxWrite = cluster.isWorker ? PIPE_BUF : MAX_WRITE
  const stdout = pino.destination({ dest: 1, sync: true, maxWrite })
  let pending = ''
  let pendingBytes = 0
  let scheduled = false
  const handOver = (): void => {
    scheduled = false
    if (pending === '') return
    stdout.write(pending)
    pending = ''
    pendingBytes = 0
  }
  // However the process ends (process.exit after a stop, an uncaught error, a failed start), the
  // lines of its last turn go out.
  process.once('exit', () => {
    handOver()
    stdout.flushSync()
  })
  return {
    write (line) {
      const bytes = Buffer.byteLength(line)
      if (pendingBytes + bytes > maxWrite) handOver()
      pending += line
      pendingBytes += bytes
      if (!scheduled) {
        scheduled = true
        setImmediate(handOver)
      }
    }
  }
}
