import pg from 'pg'
import { UnstorableTextError } from '../errors.js'
import type { Plant, PlantRecord } from './store.js'

/**
 * int8 arrives as bigint, exact (node-postgres hands it over as a string by default). Set on
 * the store's own connections only, not in the process-wide registry.
 */
export const TYPES = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === 20 ? (value: string) => BigInt(value) : pg.types.getTypeParser(oid, format ?? 'text')) as pg.CustomTypesConfig['getTypeParser']
}

export interface PlantRow { id: bigint, name: string, tag: string | null }

export function rowToPlant ({ id, name, tag }: PlantRow): PlantRecord {
  return tag === null ? { id, name } : { id, name, tag }
}

/** PostgreSQL's text cannot hold U+0000; such a name or tag is refused before it is sent. */
export function unstorable (plant: Plant): UnstorableTextError | undefined {
  if (!plant.name.includes('\u0000') && plant.tag?.includes('\u0000') !== true) return undefined
  return new UnstorableTextError('The name or tag holds the character U+0000, which this store cannot keep; remove it.')
}

/** A row of a page: a plant (all null on a page with none) and the change log's head, read in the same statement. */
export interface ListRow { id: bigint | null, name: string | null, tag: string | null, position: bigint }

/** A page query that also answers the log's head from the same snapshot: one row of nulls and the head when no plant matches. */
const withHead = (page: string): string => `SELECT p.id, p.name, p.tag, change_log.head AS position FROM change_log LEFT JOIN LATERAL (${page}) p ON true ORDER BY p.id`

/** The page queries: keyset pagination on the primary key or the (tag, id) index, never OFFSET. Ids travel as text, exact. */
export const PAGE_SQL = {
  first: 'SELECT id, name, tag FROM plants ORDER BY id LIMIT $1',
  after: 'SELECT id, name, tag FROM plants WHERE id > $1::int8 ORDER BY id LIMIT $2',
  tagFirst: 'SELECT id, name, tag FROM plants WHERE tag = $1 ORDER BY id LIMIT $2',
  tagAfter: 'SELECT id, name, tag FROM plants WHERE tag = $1 AND id > $2::int8 ORDER BY id LIMIT $3'
}

/** The API's pages: PAGE_SQL with the log's head. */
export const LIST_SQL = {
  first: withHead(PAGE_SQL.first),
  after: withHead(PAGE_SQL.after),
  tagFirst: withHead(PAGE_SQL.tagFirst),
  tagAfter: withHead(PAGE_SQL.tagAfter)
}
