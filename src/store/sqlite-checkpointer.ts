// The checkpointer thread: copies the WAL's frames into the database file off the event loop.
// It syncs the WAL before copying and the database file after, and both syncs are its own, so
// the event loop never waits for them. It has a connection of its own, which never writes rows.
import Database from 'better-sqlite3'
import { parentPort, workerData } from 'node:worker_threads'
import { describe } from './describe.js'
import { configure } from './sqlite-schema.js'

/** What the owner gives the thread: the database file. */
export interface CheckpointerData { path: string }
/** A checkpoint's outcome: whether it ran, and SQLite's (busy, frames in the WAL, frames copied), or why it failed. */
export type CheckpointResult = [ok: true, busy: number, log: number, checkpointed: number] | [ok: false, message: string]

const { path } = workerData as CheckpointerData
let db: Database.Database | undefined

type Outcome = Array<{ busy: bigint, log: bigint, checkpointed: bigint }>

/** RESTART's tries for the write lock, RESTART_PAUSE_MS apart: the writer holds it only while it runs a turn. */
const RESTART_TRIES = 5
const RESTART_PAUSE_MS = 1
const pause = new Int32Array(new SharedArrayBuffer(4))

/**
 * Two steps, neither of which waits for a lock. PASSIVE copies the bulk of the WAL without taking
 * the write lock; but the writer commits meanwhile, so the WAL is never all copied when it next
 * begins, and it would never restart: under steady writes it grew by hundreds of MiB. RESTART then
 * takes the write lock if it is free, syncs the WAL, copies the few frames committed since, syncs
 * the database file and returns: the next commit restarts the WAL from its beginning (unless a
 * reader still reads it). Where the lock is taken (or a reader is still on the WAL), it is only
 * one more PASSIVE and says busy: it is tried again a moment later, a few times, on this thread.
 * The writer meets the lock only for that copy and its two syncs, and tries again within 5 ms
 * (LOCK_POLL_MS).
 */
function checkpoint (): CheckpointResult {
  try {
    if (db === undefined) {
      db = new Database(path)
      configure(db, { busyTimeoutMs: 0 })
    }
    db.pragma('wal_checkpoint(PASSIVE)')
    let [row] = db.pragma('wal_checkpoint(RESTART)') as Outcome
    for (let tries = 1; row.busy !== 0n && tries < RESTART_TRIES; tries++) {
      Atomics.wait(pause, 0, 0, RESTART_PAUSE_MS)
      ;[row] = db.pragma('wal_checkpoint(RESTART)') as Outcome
    }
    return [true, Number(row.busy), Number(row.log), Number(row.checkpointed)]
  } catch (error) {
    return [false, describe(error)]
  }
}

parentPort!.on('message', (message: 'checkpoint' | 'close') => {
  if (message === 'close') {
    // The owner's connections are still open, so closing this one leaves the WAL in place.
    db?.close()
    parentPort!.close()
    return
  }
  parentPort!.postMessage(checkpoint() satisfies CheckpointResult)
})
