/** How long an exit waits for its output to be read, at most: a reader that never reads does not hold it for ever. */
const OUTPUT_WAIT_MS = 10_000

/**
 * Exits (with process.exitCode) once stdout and stderr have written out what they hold. A reader
 * slower than us leaves a pipe full and the rest in our memory, which process.exit drops: a failed
 * export's last line among it, without which an import of its output would succeed.
 */
export function exitOnceWritten (): void {
  let writing = 2
  const written = (): void => { if (--writing === 0) process.exit() }
  process.stdout.write('', written)
  process.stderr.write('', written)
  setTimeout(() => process.exit(), OUTPUT_WAIT_MS).unref()
}

/** The exit codes of a command stopped by a signal, as shells report one killed by it. */
const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143 } as const

/** A command's watch for SIGINT and SIGTERM: whether one came, and the end of the watch. */
export interface StopWatch {
  readonly stopped: boolean
  end: () => void
}

/**
 * Until `end`, SIGINT or SIGTERM stops the command cleanly instead of killing it where it stands:
 * `undo` runs first (a last line that says the output is not whole, a partial file removed), then
 * the command says so on stderr and exits 130 or 143 once its output is written. For commands
 * whose result must not look whole when it is not.
 */
export function watchForStop (undo: () => void): StopWatch {
  let stopped = false
  const stop = (signal: keyof typeof SIGNAL_EXIT_CODES): void => {
    if (stopped) return
    stopped = true
    undo()
    process.stderr.write(`plantstore: stopped by ${signal}.\n`)
    process.exitCode = SIGNAL_EXIT_CODES[signal]
    exitOnceWritten()
  }
  const onInt = (): void => { stop('SIGINT') }
  const onTerm = (): void => { stop('SIGTERM') }
  process.on('SIGINT', onInt)
  process.on('SIGTERM', onTerm)
  return {
    get stopped () { return stopped },
    end: () => {
      process.off('SIGINT', onInt)
      process.off('SIGTERM', onTerm)
    }
  }
}
