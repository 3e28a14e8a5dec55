// The SQLite writer thread: every write goes through here, so that the fsync of a commit never
// blocks the HTTP event loop, and writes that arrive together share one commit (group commit).
import Database from 'better-sqlite3'
import { readlinkSync } from 'node:fs'
import { setPriority } from 'node:os'
import { parentPort, workerData } from 'node:worker_threads'
import { configure } from './sqlite-schema.js'
import { PLANT_BY_ID_SQL, PLANT_COLUMNS, rowToPlant, rowToToken, type PlantRow, type TokenRow } from './sqlite-rows.js'
import type { NewToken } from './store.js'

// Writes and results cross threads as tuples, not objects: a structured clone of an object
// writes out every key; without them a write costs ~1 of its ~9 µs less (see the README).
/** A write on its way to the writer: its sequence number, the operation, the operation's arguments. */
export type WriteRequest = [seq: number, op: keyof typeof operations, args: unknown[]]
/** How a write ended: done; refused by storage trouble (503); failed otherwise (a bug: 500). */
export type Outcome = 'done' | 'unavailable' | 'failed'
/** A write's result on its way back: its sequence number, how it ended, and its value or the error's message. */
export type WriteResult = [seq: number, outcome: Outcome, valueOrMessage: unknown]

/** The writer's nice value where the OS permits it; the event loop keeps the default, 0. */
const WRITER_NICE = -10

/**
 * Every write in a commit waits while the commit waits for a CPU, so the writer should run as
 * soon as a batch arrives, not when the event loop next sleeps. On a busy core at equal priority
 * it did not: the writer took everything at once, then the event loop had nothing to do during
 * the fsync (POST throughput +9 to +16% with the service pinned to one core; see the README). Linux
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

raisePriority()
const db = new Database(workerData.path as string)
configure(db)

const sql = {
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

/** Storage trouble (busy, full, I/O, read-only) rather than a bug: answered 503, not 500. */
function isUnavailable (error: unknown): boolean {
  const code = (error as { code?: unknown }).code
  return typeof code === 'string' && /^SQLITE_(BUSY|LOCKED|FULL|IOERR|READONLY|CANTOPEN|PROTOCOL|NOMEM)/.test(code)
}

function failure (seq: number, error: unknown): WriteResult {
  return [seq, isUnavailable(error) ? 'unavailable' : 'failed', error instanceof Error ? error.message : String(error)]
}

// One transaction, so one commit and one fsync, for the whole batch. No savepoint per write
// (they cost ~1.2 µs a write): each operation changes rows with one statement at most, and
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

let pending: WriteRequest[] = []

function flush (): void {
  const batch = pending
  pending = []
  let results: WriteResult[]
  try {
    results = runBatch(batch)
  } catch (error) {
    results = batch.map(([seq]) => failure(seq, error))
  }
  parentPort!.postMessage(results)
}

// Messages that arrive while a commit is under way queue up; they are all read before the
// next setImmediate runs, so each flush commits everything that arrived meanwhile.
parentPort!.on('message', (message: WriteRequest[] | 'close') => {
  if (message === 'close') {
    if (pending.length > 0) flush()
    db.close()
    parentPort!.close()
    return
  }
  if (pending.length === 0) setImmediate(flush)
  pending.push(...message)
})
