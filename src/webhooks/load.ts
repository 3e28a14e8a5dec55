// Requests come first: the dispatcher asks this before each pass, and spaces its passes while
// the answer is yes. Deliveries then fall behind, and catch up once there is room again (the
// backlog metric shows it).
import { performance } from 'node:perf_hooks'

/** The event loop busy for more than this share of a window of at least WINDOW_MS. */
const BUSY = 0.9
const WINDOW_MS = 100
/** Requests waiting for their answers: a process whose requests wait on its disk is saturated too, with a loop that idles. */
const WAITING = 8

/** The event loop's time, idle and active, in ms since the process began (performance.eventLoopUtilization's). */
export type LoopTime = () => { idle: number, active: number }

/**
 * A judge of whether requests have the process now: its loop busy for more than BUSY of the last
 * whole window, or WAITING requests waiting (`waiting`, which leaves out change streams and polls:
 * they wait by design).
 */
export function requestsHaveProcess (waiting: () => number, loop: LoopTime = () => performance.eventLoopUtilization()): () => boolean {
  let start = loop()
  let loopBusy = false
  return () => {
    const now = loop()
    const idle = now.idle - start.idle
    const active = now.active - start.active
    if (idle + active >= WINDOW_MS) {
      loopBusy = active > BUSY * (idle + active)
      start = now
    }
    return loopBusy || waiting() >= WAITING
  }
}
