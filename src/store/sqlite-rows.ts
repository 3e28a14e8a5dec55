import type { PlantRecord, Scope, TokenRecord } from './store.js'

export interface PlantRow { id: bigint, name: string, tag: string | null }
export interface TokenRow { id: number, name: string, scopes: string, created_at: number, expires_at: number | null, revoked_at: number | null }

export function rowToPlant (row: PlantRow): PlantRecord {
  return row.tag === null ? { id: row.id, name: row.name } : { id: row.id, name: row.name, tag: row.tag }
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
