// The checkpointer thread: copies the WAL's frames into the database file off the event loop.
// It syncs the WAL before copying and the database file after, and both syncs are its own, so
// the event loop never waits for them. It has a connection of its own, which never writes rows.
import type Database from 'better-sqlite3'
import { parentPort, workerData } from 'node:worker_threads'
import { describe } from './describe.js'
import { openDatabase } from './sqlite-driver.js'
import { configure } from './sqlite-schema.js'

/** What the owner gives the thread: the database file. */
export interface CheckpointerData { path: string }
/** A checkpoint's outcome: whether it ran, and SQLite's (busy, frames in the WAL, frames copied), or why it failed. */
export type CheckpointResult = [ok: true, busy: number, log: number, checkpointed: number] | [ok: false, message: string]

const { path } = workerData as CheckpointerData
let db: Database.Database | undefined

type Outcome = Array<{ busy: bigint, log: bigint, checkpointed: bigint }>

/** Frames since the WAL's last restart past which a checkpoint also makes it restart (4× the store's bound, 16 MiB of pages). */
const RESTART_FRAMES = 4000
/** RESTART's tries for the write lock, RESTART_PAUSE_MS apart: the writer holds it only while it runs a turn. */
const RESTART_TRIES = 5
const RESTART_PAUSE_MS = 1
const pause = new Int32Array(new SharedArrayBuffer(4))

/**
 * PASSIVE copies the WAL without taking the write lock. When the writer pauses now and then,
 * that is enough: the next commit finds the WAL all copied and restarts it. But under writes
 * that never pause the WAL is never all copied when the writer begins, and it would never
 * restart (it grew by hundreds of MiB). So once it holds RESTART_FRAMES since its last restart,
 * RESTART follows: it takes the write lock if it is free, syncs the WAL, copies the few frames
 * committed since, syncs the database file and returns, and the next commit restarts the WAL
 * (unless a reader still reads it). Where the lock is taken (or a reader is still on the WAL),
 * it is only one more PASSIVE and says busy: it is tried again a moment later, a few times, on
 * this thread. Neither step waits for a lock. The writer meets the lock only for that copy and
 * its two syncs (so only past the bound, not at every checkpoint), and tries again within 5 ms
 * (LOCK_POLL_MS).
 */
function checkpoint (): CheckpointResult {
  try {
    if (db === undefined) {
      db = openDatabase(path)
      configure(db, { busyTimeoutMs: 0 })
    }
    let [row] = db.pragma('wal_checkpoint(PASSIVE)') as Outcome
    if (row.log >= RESTART_FRAMES) {
      [row] = db.pragma('wal_checkpoint(RESTART)') as Outcome
      for (let tries = 1; row.busy !== 0n && tries < RESTART_TRIES; tries++) {
        Atomics.wait(pause, 0, 0, RESTART_PAUSE_MS)
        ;[row] = db.pragma('wal_checkpoint(RESTART)') as Outcome
      }
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
