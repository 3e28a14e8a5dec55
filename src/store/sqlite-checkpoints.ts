// The SQLite store's checkpoints: the WAL is copied into the database file on a thread of its
// own (src/store/sqlite-checkpointer.ts), so that the event loop never waits for it.
import { extname } from 'node:path'
import { Worker } from 'node:worker_threads'
import type { CheckpointerData, CheckpointResult } from './sqlite-checkpointer.js'
import { WAL_CHECKPOINT_FRAMES } from './sqlite-writes.js'

const CHECKPOINTER = new URL(`./sqlite-checkpointer${extname(import.meta.url)}`, import.meta.url)
/** The least time between two checkpoints, in ms: a WAL that a reader pins is not checkpointed in a loop. */
const CHECKPOINT_INTERVAL_MS = 200
/** After the checkpointer thread failed, the next one starts no sooner than this, in ms. */
const CHECKPOINTER_BACKOFF_MS = 1000

/** Built, the checkpointer is plain JS; from source (tests under tsx), the thread must load tsx itself. */
function startWorker (workerData: CheckpointerData): Worker {
  if (CHECKPOINTER.pathname.endsWith('.js')) return new Worker(CHECKPOINTER, { workerData })
  const bootstrap = `import('tsx/esm/api').then(tsx => { tsx.register(); return import(${JSON.stringify(CHECKPOINTER.href)}) })`
  return new Worker(bootstrap, { eval: true, workerData })
}

/**
 * The checkpointer thread's lifecycle: started at the first checkpoint, asked for one at a time,
 * started again (after a pause) if it fails, and closed with the store.
 */
export class Checkpoints {
  private worker?: Worker
  private running = false
  private nextAt = 0
  private closed = false

  /** Checkpoints the database at `path`, whose WAL holds `walFrames()` frames; `stats.checkpoints` counts them. */
  constructor (private readonly path: string, private readonly walFrames: () => number, private readonly stats: { checkpoints: number }) {}

  /**
   * Asks the checkpointer thread to copy the WAL into the database file once the WAL has grown
   * past its bound: one checkpoint at a time, and not in a loop when a reader pins the WAL.
   */
  maybe (): void {
    if (this.running || this.closed || Date.now() < this.nextAt) return
    if (this.walFrames() < WAL_CHECKPOINT_FRAMES) return
    const worker = this.worker ?? this.start()
    this.running = true
    this.nextAt = Date.now() + CHECKPOINT_INTERVAL_MS
    this.stats.checkpoints++
    worker.postMessage('checkpoint')
  }

  /** Ends the thread, if one runs; resolves once it has exited. */
  async close (): Promise<void> {
    const worker = this.worker
    this.worker = undefined
    this.closed = true
    if (worker === undefined) return
    const exited = new Promise(resolve => worker.once('exit', resolve))
    worker.ref() // the wait for it must keep the process alive
    worker.postMessage('close')
    await exited
  }

  private start (): Worker {
    const worker = startWorker({ path: this.path })
    worker.unref()
    worker.on('message', (result: CheckpointResult) => {
      this.running = false
      if (!result[0]) this.nextAt = Date.now() + CHECKPOINTER_BACKOFF_MS
    })
    const lost = (): void => {
      if (this.worker !== worker) return
      this.worker = undefined
      this.running = false
      this.nextAt = Date.now() + CHECKPOINTER_BACKOFF_MS
    }
    worker.on('error', lost)
    worker.on('exit', lost)
    this.worker = worker
    return worker
  }
}
