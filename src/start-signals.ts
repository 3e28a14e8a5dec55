/**
 * A stop asked for while the server starts (a supervisor that changed its mind, a Ctrl-C) ends it
 * at once, with exit 0 rather than Node's death by the signal: nothing has been answered, and what
 * the start had under way is safe to leave (a migration rolls back; SQLite's files are whole after
 * any exit). A start that failed already is ending with its own code (process.exitCode). Taken from
 * the command's first step, before the server's modules load, until the server's own handlers.
 */
const stopWhileStarting = (): void => { process.exit() }

const SIGNALS = ['SIGTERM', 'SIGINT'] as const

/** From now until `endStartSignals`, SIGTERM and SIGINT end the start. */
export function stopOnSignalsWhileStarting (): void {
  for (const signal of SIGNALS) process.on(signal, stopWhileStarting)
}

/** The server has its own handlers now: the start's are removed. */
export function endStartSignals (): void {
  for (const signal of SIGNALS) process.off(signal, stopWhileStarting)
}
