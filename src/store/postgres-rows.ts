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

/** The page queries: keyset pagination on the primary key or the (tag, id) index, never OFFSET. Ids travel as text, exact. */
export const LIST_SQL = {
  first: 'SELECT id, name, tag FROM plants ORDER BY id LIMIT $1',
  after: 'SELECT id, name, tag FROM plants WHERE id > $1::int8 ORDER BY id LIMIT $2',
  tagFirst: 'SELECT id, name, tag FROM plants WHERE tag = $1 ORDER BY id LIMIT $2',
  tagAfter: 'SELECT id, name, tag FROM plants WHERE tag = $1 AND id > $2::int8 ORDER BY id LIMIT $3'
}
