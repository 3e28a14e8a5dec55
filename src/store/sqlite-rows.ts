import type { Change, ChangeType, PlantRecord, Scope, TokenRecord } from './store.js'

/**
 * A plant as SQLite hands it over: plant statements run in raw mode (`.raw()`), which gives
 * each row as an array of its columns, `id, name, tag` in that order. A named row costs more:
 * better-sqlite3 builds it through V8's slow path, a key lookup and a shape change per column
 * per row (the saving on a page of 100 is in docs/performance.md).
 */
export type PlantRow = [id: bigint, name: string, tag: string | null]

/** What every plant query selects, in PlantRow's order. */
export const PLANT_COLUMNS = 'id, name, tag'

/** One plant by id, and its version (PlantRow's columns, then the version); the reader and the writer both ask it. */
export const VERSIONED_PLANT_SQL = `SELECT ${PLANT_COLUMNS}, version FROM plants WHERE id = ?`

/** The page queries: keyset pagination on the id (the rowid) or the (tag, id) index, never OFFSET. */
export const LIST_SQL = {
  first: `SELECT ${PLANT_COLUMNS} FROM plants ORDER BY id LIMIT ?`,
  after: `SELECT ${PLANT_COLUMNS} FROM plants WHERE id > ? ORDER BY id LIMIT ?`,
  tagFirst: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? ORDER BY id LIMIT ?`,
  tagAfter: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? AND id > ? ORDER BY id LIMIT ?`
}

export interface TokenRow { id: number, name: string, scopes: string, created_at: number, expires_at: number | null, revoked_at: number | null }

export function rowToPlant ([id, name, tag]: PlantRow): PlantRecord {
  return tag === null ? { id, name } : { id, name, tag }
}

export function rowToToken (row: TokenRow): TokenRecord {
  return {
    id: row.id,
    name: row.name,
    scopes: row.scopes.split(' ') as Scope[],
    createdAt: new Date(row.created_at),
    ...(row.expires_at === null ? {} : { expiresAt: new Date(row.expires_at) }),
    ...(row.revoked_at === null ? {} : { revokedAt: new Date(row.revoked_at) })
  }
}

/** The change log's head and floor (positions at or below it are gone). */
export const BOUNDS_SQL = 'SELECT head, coalesce((SELECT min(position) - 1 FROM changes), head) AS floor FROM change_log'

/** Changes after $after up to $end, with the tag $tag before or after (any when null), at most $limit. Rows in ChangeRow's order. */
export const CHANGES_SQL = `SELECT position, type, plant_id, name, tag, at FROM changes
  WHERE position > $after AND position <= $end AND ($tag IS NULL OR tag = $tag OR tag_before = $tag) ORDER BY position LIMIT $limit`

export type ChangeRow = [position: bigint, type: ChangeType, id: bigint, name: string, tag: string | null, at: bigint]

export function rowToChange ([position, type, id, name, tag, at]: ChangeRow): Change {
  return { position, type, plant: rowToPlant([id, name, tag]), at: new Date(Number(at)) }
}
