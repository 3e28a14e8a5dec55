// The SQLite writer thread: every write goes through here, so that the fsync of a commit never
// blocks the HTTP event loop, and writes that arrive together share one commit (group commit).
import Database from 'better-sqlite3'
import { readlinkSync } from 'node:fs'
import { setPriority } from 'node:os'
import { parentPort, workerData } from 'node:worker_threads'
import { isBusy, isUnavailable } from './sqlite-errors.js'
import { checkpoint, configure } from './sqlite-schema.js'
import { PLANT_BY_ID_SQL, PLANT_COLUMNS, rowToPlant, rowToToken, type PlantRow, type TokenRow } from './sqlite-rows.js'
import type { NewToken } from './store.js'

// Writes and results cross threads as tuples, not objects: a structured clone of an object
// writes out every key, a measurable share of a write (docs/performance.md).
/** A write on its way to the writer: its sequence number, the operation, the operation's arguments. */
export type WriteRequest = [seq: number, op: keyof typeof operations, args: unknown[]]
/** How a write ended: done; refused by storage trouble (503); failed otherwise (a bug: 500). */
export type Outcome = 'done' | 'unavailable' | 'failed'
/** A write's result on its way back: its sequence number, how it ended, and its value or the error's message. */
export type WriteResult = [seq: number, outcome: Outcome, valueOrMessage: unknown]
/**
 * The writes asked for in one turn of the owner's event loop, sent as one message with the time
 * (Date.now()) by which they must be answered: a write still waiting then is answered
 * 'unavailable' and never runs.
 */
export type WriteBatch = [deadline: number, requests: WriteRequest[]]
/** What the owner gives the thread: the database file, and the most a write may wait (ms). */
export interface WriterData { path: string, writeTimeoutMs: number }
/** Sent once the database is open and every statement prepared; a failed start throws instead. */
export type Ready = 'ready'

/** The writer's nice value where the OS permits it; the event loop keeps the default, 0. */
const WRITER_NICE = -10

/**
 * Every write in a commit waits while the commit waits for a CPU, so the writer should run as
 * soon as a batch arrives, not when the event loop next sleeps. On a busy core at equal priority
 * it did not: the writer took everything at once, then the event loop had nothing to do during
 * the fsync (POST throughput with the service pinned to one core: docs/performance.md). Linux
 * lets a thread's priority be raised with CAP_SYS_NICE (root has it); elsewhere, or without it,
 * the writer keeps the default.
 */
function raisePriority (): void {
  try {
    setPriority(Number(readlinkSync('/proc/thread-self').split('/').at(-1)), WRITER_NICE)
  } catch {
    // not permitted, or not Linux
  }
}

/** An error as one line naming its cause: SQLite's or the OS's code and message. */
function describe (error: unknown): string {
  const { code, message } = error as { code?: unknown, message?: unknown }
  const parts = [code, message].filter(part => typeof part === 'string' && part !== '')
  return parts.length > 0 ? parts.join(': ') : String(error)
}

/** Opens the database and prepares every statement; a failure names its cause. */
function open (path: string): { db: Database.Database, sql: ReturnType<typeof prepare> } {
  try {
    const db = new Database(path)
    // With no other process writing, nothing waits; when one does, commit() waits for the
    // lock itself, until the batch's first deadline at most.
    configure(db, { busyTimeoutMs: 0 })
    return { db, sql: prepare(db) }
  } catch (error) {
    // A SqliteError reaches the owner's 'error' event without its message: send plain words.
    throw new Error(describe(error))
  }
}

function prepare (db: Database.Database) {
  return {
    insertPlant: db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING'),
    getPlant: db.prepare(PLANT_BY_ID_SQL).raw(),
    replacePlant: db.prepare(`UPDATE plants SET name = ?, tag = ? WHERE id = ? RETURNING ${PLANT_COLUMNS}`).raw(),
    removePlant: db.prepare('DELETE FROM plants WHERE id = ?'),
    insertToken: db.prepare('INSERT INTO tokens (name, digest, scopes, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING *').safeIntegers(false),
    insertFirstToken: db.prepare('INSERT INTO tokens (name, digest, scopes, created_at, expires_at) SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tokens) RETURNING *').safeIntegers(false),
    activeTokenByName: db.prepare('SELECT 1 FROM tokens WHERE name = ? AND revoked_at IS NULL'),
    // An expired token keeps its row (and its history in `tokens list`) but frees its name: it is
    // marked ended at its expiry, which the unique index on active names can see.
    retireExpiredName: db.prepare('UPDATE tokens SET revoked_at = expires_at WHERE name = ? AND revoked_at IS NULL AND expires_at <= ?'),
    revokeByName: db.prepare('UPDATE tokens SET revoked_at = ? WHERE name = ? AND revoked_at IS NULL RETURNING *').safeIntegers(false),
    revokeById: db.prepare('UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ? RETURNING *').safeIntegers(false)
  }
}

raisePriority()
const { path, writeTimeoutMs } = workerData as WriterData
const { db, sql } = open(path)
parentPort!.postMessage('ready' satisfies Ready)

function tokenParams (token: NewToken): unknown[] {
  return [token.name, token.digest, token.scopes.join(' '), Date.now(), token.expiresAt?.getTime() ?? null]
}

const operations = {
  ping: () => true,
  create: (id: bigint, name: string, tag: string | null) => {
    if (sql.insertPlant.run(id, name, tag).changes === 1) return 'created'
    const [, storedName, storedTag] = sql.getPlant.get(id) as PlantRow
    return storedName === name && storedTag === tag ? 'same' : 'conflict'
  },
  replace: (id: bigint, name: string, tag: string | null) => {
    const row = sql.replacePlant.get(name, tag, id) as PlantRow | undefined
    return row === undefined ? undefined : rowToPlant(row)
  },
  remove: (id: bigint) => sql.removePlant.run(id).changes === 1,
  createToken: (token: NewToken) => {
    sql.retireExpiredName.run(token.name, Date.now())
    if (sql.activeTokenByName.get(token.name) !== undefined) return 'name-taken'
    return rowToToken(sql.insertToken.get(...tokenParams(token)) as TokenRow)
  },
  createFirstToken: (token: NewToken) => {
    const row = sql.insertFirstToken.get(...tokenParams(token)) as TokenRow | undefined
    return row === undefined ? undefined : rowToToken(row)
  },
  revokeToken: (nameOrId: string) => {
    const row = (sql.revokeByName.get(Date.now(), nameOrId) ??
      (/^\d+$/.test(nameOrId) ? sql.revokeById.get(Date.now(), Number(nameOrId)) : undefined)) as TokenRow | undefined
    return row === undefined ? undefined : rowToToken(row)
  }
}

function failure (seq: number, error: unknown): WriteResult {
  return [seq, isUnavailable(error) ? 'unavailable' : 'failed', error instanceof Error ? error.message : String(error)]
}

// One transaction, so one commit and one fsync, for the whole batch. No savepoint per write
// (a measured cost per write): each operation changes rows with one statement at most, and
// SQLite undoes a failed statement by itself, so a failing write leaves the others intact.
// Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction: then
// the batch stops there and every write in it is answered with the error.
const runBatch = db.transaction((batch: WriteRequest[]): WriteResult[] => batch.map(([seq, op, args]) => {
  try {
    return [seq, 'done', (operations[op] as (...args: unknown[]) => unknown)(...args)]
  } catch (error) {
    if (!db.inTransaction) throw error
    return failure(seq, error)
  }
}))

let pending: WriteBatch[] = []
/** Why the last batch could not begin: the lock error, repeated to the writes that then expire. */
let lockError = 'database is locked'

/**
 * Runs `batches` in one transaction. BEGIN IMMEDIATE takes the write lock before any write runs;
 * if another connection holds it, waits for it until the earliest deadline at most. Undefined
 * when the lock stayed taken: then nothing ran, and the caller keeps the batches for later.
 */
function commit (batches: WriteBatch[]): WriteResult[] | undefined {
  const requests = batches.length === 1 ? batches[0][1] : batches.flatMap(([, requests]) => requests)
  try {
    try {
      return runBatch.immediate(requests)
    } catch (error) {
      if (!isBusy(error)) throw error
      lockError = describe(error)
    }
    let earliest = Infinity
    for (const [deadline] of batches) earliest = Math.min(earliest, deadline)
    // At least 1 ms, so that the earliest write has expired when the next flush looks; at most
    // a whole timeout, should the clock have stepped back.
    db.pragma(`busy_timeout = ${Math.min(writeTimeoutMs, Math.max(1, Math.ceil(earliest - Date.now())))}`)
    try {
      return runBatch.immediate(requests)
    } finally {
      db.pragma('busy_timeout = 0')
    }
  } catch (error) {
    if (isBusy(error)) {
      lockError = describe(error)
      return undefined
    }
    return requests.map(([seq]) => failure(seq, error))
  }
}

/**
 * Commits every write that arrived since the last flush and is still within its deadline; those
 * past it are answered 'unavailable' without running, so a write answered 503 is not stored.
 * If the write lock stayed taken, the rest wait for the next flush, after the messages that
 * arrived meanwhile were read: each waits for the lock until its own deadline.
 */
function flush (): void {
  if (pending.length === 0) return
  const now = Date.now()
  const batches = pending
  pending = []
  const expired: WriteResult[] = []
  const live: WriteBatch[] = []
  for (const batch of batches) {
    if (batch[0] > now) live.push(batch)
    else for (const [seq] of batch[1]) expired.push([seq, 'unavailable', `The write waited for the database past its deadline: ${lockError}`])
  }
  // Answered before the others wait for the lock, not after.
  if (expired.length > 0) parentPort!.postMessage(expired)
  if (live.length === 0) return
  const committed = commit(live)
  if (committed !== undefined) {
    parentPort!.postMessage(committed)
  } else {
    pending = live
    setImmediate(flush)
  }
}

/**
 * On a clean stop: answers what is left (within the deadlines), then empties the WAL into the
 * database file, so that the `.db` file alone holds everything. The owner closes its reader
 * first, so this connection is the last one and its close also removes the -wal and -shm files.
 */
function close (): void {
  while (pending.length > 0) flush()
  try {
    checkpoint(db, writeTimeoutMs)
  } catch {
    // another process is checkpointing or writing: the WAL stays, and is not lost
  }
  db.close()
  parentPort!.close()
}

// Messages that arrive while a commit is under way queue up; they are all read before the
// next setImmediate runs, so each flush commits everything that arrived meanwhile.
parentPort!.on('message', (message: WriteBatch | 'close') => {
  if (message === 'close') return close()
  if (pending.length === 0) setImmediate(flush)
  pending.push(message)
})
