// The write connection: it runs on the event loop, one transaction per turn, with
// `synchronous = NORMAL`, so a COMMIT writes the WAL but does not sync it. The store makes each
// commit durable with an fdatasync of the WAL on libuv's thread pool before it answers
// (docs/durability.md argues why that suffices).
import type Database from 'better-sqlite3'
import { describe } from './describe.js'
import { openDatabase } from './sqlite-driver.js'
import { configure } from './sqlite-schema.js'
import { VERSIONED_PLANT_SQL, rowToPlant, rowToToken, type PlantRow, type TokenRow } from './sqlite-rows.js'
import { webhookWrites } from './sqlite-webhooks.js'
import { isSamePlant, refusalOf, type ChangeType, type Conditions, type Created, type NewToken, type VersionedPlant } from './store.js'
import { DONE_WITH_BY_WEBHOOKS } from './webhooks.js'

/** A write's name: one of the operations below. */
export type Operation = keyof ReturnType<typeof operationsOf>
/** How a write ended in its transaction: done with a value, or failed with an error. */
export type WriteResult = [done: true, value: unknown] | [done: false, error: unknown]

/**
 * Stores a plant on `db` at `version`, unless its id is taken: then tells whether the stored plant
 * is the same, and its version. The store's create and the import's, so that both judge sameness alike.
 */
export function plantCreator (db: Database.Database): (id: bigint, name: string, tag: string | null, version: bigint) => Created {
  const insert = db.prepare('INSERT INTO plants (id, name, tag, version) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO NOTHING')
  const stored = db.prepare(VERSIONED_PLANT_SQL).raw()
  return (id, name, tag, version) => {
    if (insert.run(id, name, tag, version).changes === 1) return { outcome: 'created', version }
    const [, storedName, storedTag, storedVersion] = stored.get(id) as [...PlantRow, bigint]
    return { outcome: isSamePlant({ name: storedName, tag: storedTag }, { name, tag }) ? 'same' : 'conflict', version: storedVersion }
  }
}

/**
 * The plant writes of the write connection, each with its entry in the change log: the next
 * position (the head's successor: this connection is the only writer while its transaction
 * runs) becomes the plant's version. Each write comes plain, and `isolated` in a savepoint of
 * its own, so that a write that fails halfway leaves neither its plant nor its change (see
 * openWriter for when each runs). The head is read once per
 * transaction (`begin`), advanced in memory by each write that logged a change, and stored once
 * (`end`) before the commit.
 */
function plantWrites (db: Database.Database) {
  const sql = {
    head: db.prepare('SELECT head FROM change_log').pluck(),
    advance: db.prepare('UPDATE change_log SET head = ?'),
    stored: db.prepare('SELECT name, tag, version FROM plants WHERE id = ?').raw(),
    update: db.prepare('UPDATE plants SET name = ?, tag = ?, version = ? WHERE id = ?'),
    remove: db.prepare('DELETE FROM plants WHERE id = ?'),
    log: db.prepare('INSERT INTO changes (position, type, plant_id, name, tag, tag_before, at) VALUES (?, ?, ?, ?, ?, ?, ?)')
  }
  const create = plantCreator(db)
  /** The head as read at the transaction's start, and as this transaction's writes advanced it. */
  let read = 0n
  let head = 0n
  const next = (): bigint => head + 1n
  const log = (position: bigint, type: ChangeType, id: bigint, name: string, tag: string | null, tagBefore: string | null): void => {
    sql.log.run(position, type, id, name, tag, tagBefore, Date.now())
  }
  /** A write, plain and in a savepoint of its own; the head moves once it is done (its savepoint released). */
  const logged = <A extends unknown[], R>(write: (...args: A) => R, position: (result: R) => bigint | undefined) => {
    const inSavepoint = db.transaction(write)
    const moved = (result: R): R => {
      head = position(result) ?? head
      return result
    }
    return { plain: (...args: A): R => moved(write(...args)), isolated: (...args: A): R => moved(inSavepoint(...args)) }
  }
  type Stored = [name: string, tag: string | null, version: bigint]
  return {
    begin: () => { read = head = sql.head.get() as bigint },
    end: () => { if (head !== read) sql.advance.run(head) },
    create: logged((id: bigint, name: string, tag: string | null) => {
      const created = create(id, name, tag, next())
      if (created.outcome === 'created') log(created.version, 'plant.created', id, name, tag, null)
      return created
    }, created => created.outcome === 'created' ? created.version : undefined),
    replace: logged((id: bigint, name: string, tag: string | null, conditions?: Conditions): VersionedPlant | 'not-found' | 'precondition-failed' => {
      const stored = sql.stored.get(id) as Stored | undefined
      const refusal = refusalOf(stored?.[2], conditions)
      if (refusal !== undefined || stored === undefined) return refusal ?? 'not-found'
      const version = next()
      sql.update.run(name, tag, version, id)
      log(version, 'plant.updated', id, name, tag, stored[1])
      return { plant: rowToPlant([id, name, tag]), version }
    }, replaced => typeof replaced === 'object' ? replaced.version : undefined),
    remove: logged((id: bigint, conditions?: Conditions): { position: bigint } | 'not-found' | 'precondition-failed' => {
      const stored = sql.stored.get(id) as Stored | undefined
      const refusal = refusalOf(stored?.[2], conditions)
      if (refusal !== undefined || stored === undefined) return refusal ?? 'not-found'
      sql.remove.run(id)
      const position = next()
      log(position, 'plant.deleted', id, stored[0], stored[1], stored[1])
      return { position }
    }, removed => typeof removed === 'object' ? removed.position : undefined)
  }
}

function prepare (db: Database.Database) {
  return {
    plants: plantWrites(db),
    webhooks: webhookWrites(db),
    // The leading run of the oldest `batch` changes made before `before` that webhooks no longer
    // need: only a prefix of the log is ever dropped.
    prune: db.prepare(`WITH oldest AS (SELECT position, at FROM changes WHERE ${DONE_WITH_BY_WEBHOOKS} ORDER BY position LIMIT ?)
      DELETE FROM changes WHERE position IN (SELECT position FROM oldest WHERE position < coalesce((SELECT min(position) FROM oldest WHERE at >= ?), 9223372036854775807))`),
    insertToken: db.prepare('INSERT INTO tokens (name, digest, scopes, created_at, expires_at) VALUES (?, ?, ?, ?, ?) RETURNING *').safeIntegers(false),
    insertFirstToken: db.prepare('INSERT INTO tokens (name, digest, scopes, created_at, expires_at) SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM tokens) RETURNING *').safeIntegers(false),
    activeTokenByName: db.prepare('SELECT 1 FROM tokens WHERE name = ? AND revoked_at IS NULL'),
    // An expired token keeps its row (and its history in `tokens list`) but frees its name: it is
    // marked ended at its expiry, which the unique index on active names can see.
    retireExpiredName: db.prepare('UPDATE tokens SET revoked_at = expires_at WHERE name = ? AND revoked_at IS NULL AND expires_at <= ?'),
    // A token that expired is kept as revoked at its expiry, as when its name is taken again.
    revokeByName: db.prepare('UPDATE tokens SET revoked_at = CASE WHEN expires_at <= $now THEN expires_at ELSE $now END WHERE name = $key AND revoked_at IS NULL RETURNING *').safeIntegers(false),
    revokeById: db.prepare('UPDATE tokens SET revoked_at = coalesce(revoked_at, CASE WHEN expires_at <= $now THEN expires_at ELSE $now END) WHERE id = $key RETURNING *').safeIntegers(false)
  }
}

function tokenParams (token: NewToken): unknown[] {
  return [token.name, token.digest, token.scopes.join(' '), Date.now(), token.expiresAt?.getTime() ?? null]
}

/** The operations of the write connection: the plant writes `isolated` in savepoints, or plain. */
function operationsOf (sql: ReturnType<typeof prepare>, isolated: boolean) {
  const plant = <T extends { plain: unknown, isolated: unknown }>(write: T): T['plain'] => isolated ? write.isolated : write.plain
  return {
    ...sql.webhooks,
    ping: () => true,
    create: plant(sql.plants.create),
    replace: plant(sql.plants.replace),
    remove: plant(sql.plants.remove),
    pruneChanges: (before: number, batch: number) => sql.prune.run(batch, before).changes,
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
      const now = Date.now()
      const row = (sql.revokeByName.get({ now, key: nameOrId }) ??
        (/^\d+$/.test(nameOrId) ? sql.revokeById.get({ now, key: Number(nameOrId) }) : undefined)) as TokenRow | undefined
      return row === undefined ? undefined : rowToToken(row)
    }
  }
}

/** Thrown to roll back a turn run plain whose write failed: the turn runs again, isolated. */
const RUN_ISOLATED = new Error('a write failed: run the turn again with each write in a savepoint')

/** The write connection and the one call that runs a turn's writes. */
export interface Writer {
  db: Database.Database
  /**
   * Runs `writes` in one transaction, begun with BEGIN IMMEDIATE and no busy timeout. Throws
   * SQLITE_BUSY at once, before anything ran, when another connection holds the write lock;
   * throws whatever made SQLite roll back the whole transaction (a full disk), and then none of
   * the writes is stored.
   */
  run: (writes: Array<{ op: Operation, args: unknown[] }>) => WriteResult[]
  /** Frames in the WAL not yet copied into the database file, as the WAL's index tells without a lock; 0 when it cannot tell now. */
  walFrames: () => number
}

/**
 * Opens the write connection. The event loop must never sleep on it: once open, no busy timeout;
 * no automatic checkpoint (the store checkpoints on another thread), and no sync in COMMIT.
 */
export function openWriter (path: string): Writer {
  const db = openDatabase(path)
  try {
    // Opening reads the schema, and may meet another process that opens or closes the file (its
    // WAL's recovery, its last checkpoint): a start waits for that, with configure's busy timeout.
    configure(db, { synchronous: 'NORMAL' })
    db.pragma('wal_autocheckpoint = 0')
    // A restarted WAL is written over from its beginning: the file keeps its size (up to this
    // bound), so its frames go into blocks already allocated, whose fdatasync costs the kernel
    // about half of one that grows the file (docs/durability.md). The truncation keeps its inode.
    db.pragma(`journal_size_limit = ${WAL_LIMIT_BYTES}`)
    const sql = prepare(db)
    // NOOP copies nothing and takes no lock: it reads the WAL's index for its frames and those copied.
    const walCount = db.prepare('PRAGMA wal_checkpoint(NOOP)').raw()
    db.pragma('busy_timeout = 0')
    // A failing write must leave the others intact. A turn's writes first run plain, with no
    // savepoint (two statements a write saved); if one fails, the whole transaction is rolled
    // back and the turn runs again with each plant write in a savepoint of its own (every other
    // operation changes rows with one statement at most, which SQLite undoes by itself).
    // Some errors (a full disk, an I/O error) make SQLite roll back the whole transaction: then
    // the transaction stops there and throws, and no write of it is stored.
    const runAll = (isolated: boolean) => {
      const operations = operationsOf(sql, isolated)
      return db.transaction((writes: Array<{ op: Operation, args: unknown[] }>): WriteResult[] => {
        sql.plants.begin()
        const results = writes.map(({ op, args }): WriteResult => {
          try {
            return [true, (operations[op] as (...args: unknown[]) => unknown)(...args)]
          } catch (error) {
            if (!db.inTransaction) throw error
            if (!isolated) throw RUN_ISOLATED
            return [false, error]
          }
        })
        sql.plants.end()
        return results
      })
    }
    const plain = runAll(false)
    const isolated = runAll(true)
    return {
      db,
      walFrames: () => {
        try {
          const [, log, checkpointed] = walCount.get() as [busy: bigint, log: bigint, checkpointed: bigint]
          return Math.max(0, Number(log - checkpointed)) // both -1 when busy: then 0
        } catch {
          return 0 // another process is recovering the WAL: asked again after the next sync
        }
      },
      run: (writes) => {
        try {
          return plain.immediate(writes)
        } catch (error) {
          if (error !== RUN_ISOLATED) throw error
          return isolated.immediate(writes)
        }
      }
    }
  } catch (error) {
    db.close()
    throw new Error(describe(error))
  }
}

/** Past this many frames (pages) in the WAL not yet copied, the store asks for a checkpoint: SQLite's own bound. */
export const WAL_CHECKPOINT_FRAMES = 1000
/** What a WAL restart truncates a larger file to (one that a long read made grow); below it the file keeps its size. */
const WAL_LIMIT_BYTES = 64 * 1024 * 1024
