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

/** What a sync of the rate limit's counts answers for one token. */
export interface SharedCount {
  /** Requests counted in the window by every instance, this one's just stored included. */
  total: number
  /** Instances that counted the token in a window from `since` to this one, this one included. */
  instances: number
}

/**
 * The rate limit's counts, shared by the instances of one service (PostgreSQL): each instance's
 * own count per token and window.
 */
export interface RateWindows {
  /**
   * Stores `instance`'s counts in the window that starts at `start` (ms since the epoch), one per
   * token id, and answers for each of these tokens the window's service-wide total and how many
   * instances counted it in the windows from `since` on. A stored count only rises, so a
   * retried or late sync changes nothing.
   */
  sync (instance: string, start: number, since: number, counts: Map<number, number>): Promise<Map<number, SharedCount>>
  /** Deletes the counts of windows that start before `before`. */
  forget (before: number): Promise<void>
}

/** Plants an export reads per query, on either store: one page in memory at a time. */
export const EXPORT_PAGE = 1000

/**
 * Every plant in id order, EXPORT_PAGE at a time, as the stores' exports read them: `page(after)`
 * reads the next page past `after` (from the first plant when undefined). Keyset pages, like the API's.
 */
export async function * keysetPages (page: (after: bigint | undefined) => PlantRecord[] | Promise<PlantRecord[]>): AsyncGenerator<PlantRecord[]> {
  for (let plants = await page(undefined); plants.length > 0; plants = await page(plants[plants.length - 1].id)) {
    yield plants
    if (plants.length < EXPORT_PAGE) return
  }
}

/**
 * What `importPlants` did: stored `plants` plants (repeats of an identical plant count once), or
 * stored nothing because the store held plants already, or because the record at position `at`
 * of the source (0-based, across batches) repeats an earlier record's id with other data, or
 * holds text this store cannot keep (`reason` says which, as one sentence).
 */
export type ImportOutcome =
  | { outcome: 'imported', plants: number }
  | { outcome: 'not-empty' }
  | { outcome: 'conflict', at: number }
  | { outcome: 'unstorable', at: number, reason: string }

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

  /**
   * Every plant, in id order, in pages, all from one snapshot taken when the first page is read:
   * writes made meanwhile (by this or another process) are not seen. Runs on a connection of its
   * own and holds one page at a time; stopping early (`break`) ends the snapshot.
   */
  exportPlants (): AsyncIterable<PlantRecord[]>
  /**
   * Stores every plant of `source`, in one transaction: all of them, or (on any outcome but
   * 'imported', or when `source` throws, which rethrows) none. Refuses a store that holds plants
   * ('not-empty') unless `replace`, which deletes them first in the same transaction; tokens stay.
   * Writes by others wait while it runs (SQLite's write lock; PostgreSQL's table lock).
   */
  importPlants (source: AsyncIterable<PlantRecord[]>, options: { replace: boolean }): Promise<ImportOutcome>

  /** Stores a token; 'name-taken' if an active (unrevoked) token already has the name. */
  createToken (token: NewToken): Promise<TokenRecord | 'name-taken'>
  /** Stores `token` only if there is no token at all: the first start's bootstrap. */
  createFirstToken (token: NewToken): Promise<TokenRecord | undefined>
  /** The token whose secret has this SHA-256 digest, revoked and expired ones included. */
  findToken (digest: Buffer): Promise<{ record: TokenRecord, digest: Buffer } | undefined>
  listTokens (): Promise<TokenRecord[]>
  /** Revokes the active token with this name, or the token with this numeric id. */
  revokeToken (nameOrId: string): Promise<TokenRecord | undefined>

  /** Counts shared with other instances, when several may run on this store; none for SQLite (one process). */
  readonly rateWindows?: RateWindows

  /**
   * Called after each commit with how many writes it carried, by a store that makes concurrent
   * writes share a commit (SQLite's group commit); PostgreSQL commits each write on its own.
   */
  onCommit?: (writes: number) => void

  /** Resolves when the store can answer queries; throws StoreUnavailableError otherwise. */
  ping (): Promise<void>
  close (): Promise<void>
}
