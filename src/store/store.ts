/** A plant as the client names it: NewPlant without its id, as returned by POST /plants. */
export interface Plant { name: string, tag?: string }

/** A stored plant: NewPlant's shape. Ids are bigint end to end, so every int64 stays exact. */
export interface PlantRecord { id: bigint, name: string, tag?: string }

export type Scope = 'plants:read' | 'plants:write' | 'admin'
export const ALL_SCOPES: Scope[] = ['plants:read', 'plants:write', 'admin']
export const DEFAULT_SCOPES: Scope[] = ['plants:read', 'plants:write']

/** What the store keeps of a token: never the secret, only its SHA-256 digest. */
export interface TokenRecord {
  id: number
  name: string
  scopes: Scope[]
  createdAt: Date
  expiresAt?: Date
  revokedAt?: Date
}

export interface NewToken { name: string, digest: Buffer, scopes: Scope[], expiresAt?: Date }

/**
 * Where plants and tokens live: the one seam between HTTP and SQL. Missing or conflicting data
 * is a return value; only broken storage throws (StoreUnavailableError).
 */
export interface Store {
  /** Inserts the plant; 'same' if identical data is already stored under its id. */
  create (plant: PlantRecord): Promise<'created' | 'same' | 'conflict'>
  get (id: bigint): Promise<PlantRecord | undefined>
  /** Plants ordered by id, only those with an id greater than `after` and the exact `tag` if given. */
  list (query: { limit: number, after?: bigint, tag?: string }): Promise<PlantRecord[]>
  /** Replaces name and tag (no tag removes it); undefined when no plant has the id. */
  replace (id: bigint, plant: Plant): Promise<PlantRecord | undefined>
  remove (id: bigint): Promise<boolean>

  /** Stores a token; 'name-taken' if an active (unrevoked) token already has the name. */
  createToken (token: NewToken): Promise<TokenRecord | 'name-taken'>
  /** Stores `token` only if there is no token at all: the first start's bootstrap. */
  createFirstToken (token: NewToken): Promise<TokenRecord | undefined>
  /** The token whose secret has this SHA-256 digest, revoked and expired ones included. */
  findToken (digest: Buffer): Promise<{ record: TokenRecord, digest: Buffer } | undefined>
  listTokens (): Promise<TokenRecord[]>
  /** Revokes the active token with this name, or the token with this numeric id. */
  revokeToken (nameOrId: string): Promise<TokenRecord | undefined>

  /** Resolves when the store can answer queries; throws StoreUnavailableError otherwise. */
  ping (): Promise<void>
  close (): Promise<void>
}
