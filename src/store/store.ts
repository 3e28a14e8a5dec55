import type { WebhookStore } from './webhooks.js'

/** A plant as the client names it: NewPlant without its id, as returned by POST /plants. */
export interface Plant { name: string, tag?: string }

/** A stored plant: NewPlant's shape. Ids are bigint end to end, so every int64 stays exact. */
export interface PlantRecord { id: bigint, name: string, tag?: string }

/** A plant and its version: the position of its last change in the change log, which is its ETag. */
export interface VersionedPlant { plant: PlantRecord, version: bigint }

/** The versions a conditional write accepts (If-Match): any existing plant ('*'), or one of these. */
export type Versions = '*' | bigint[]

/**
 * True when a stored plant (`tag` null when it has none) is `plant` again: what makes a create of
 * a taken id an identical retry (`same`) rather than a conflict, in every store and import.
 */
export function isSamePlant (stored: { name: string, tag: string | null }, plant: { name: string, tag?: string | null }): boolean {
  return stored.name === plant.name && stored.tag === (plant.tag ?? null)
}

/** A write's preconditions (RFC 9110 13.1): the versions its If-Match and its If-None-Match name. */
export interface Conditions { ifMatch?: Versions, ifNoneMatch?: Versions }

/**
 * Why a write on a plant at `version` (undefined: none) does not go ahead, or undefined when it
 * does: 'not-found' without a plant, whatever the conditions (RFC 9110 13.2.1: they are ignored
 * where the answer without them would not be a success, and these writes never create); else
 * 'precondition-failed' when If-Match does not match or If-None-Match does (with `*`: always).
 */
export function refusalOf (version: bigint | undefined, { ifMatch, ifNoneMatch }: Conditions = {}): 'not-found' | 'precondition-failed' | undefined {
  if (version === undefined) return 'not-found'
  if (!meets(ifMatch, version) || (ifNoneMatch !== undefined && meets(ifNoneMatch, version))) return 'precondition-failed'
  return undefined
}

/** True when a plant at `version` (undefined: none) meets `condition` (undefined: no condition). */
export function meets (condition: Versions | undefined, version: bigint | undefined): boolean {
  if (condition === undefined) return true
  if (version === undefined) return false
  return condition === '*' || condition.includes(version)
}

/**
 * What a create did: stored the plant, found it stored already with identical data, or found
 * other data in the way. `version` is the stored plant's (none when what conflicts is not a plant under this id).
 */
export type Created = { outcome: 'created' | 'same', version: bigint } | { outcome: 'conflict', version?: bigint }

export const CHANGE_TYPES = ['plant.created', 'plant.updated', 'plant.deleted'] as const
export type ChangeType = typeof CHANGE_TYPES[number]

/** One entry of the change log: the plant as the change left it (for a delete, as it was). */
export interface Change { position: bigint, type: ChangeType, plant: PlantRecord, at: Date }

/**
 * A page of the change log after a position: the changes, `next`, the position read up to (the
 * last change's, or further when changes were passed over by a filter or none remain): the next
 * page starts after it; and `from`, the position it was read after (the one asked for, or the
 * log's floor when none was: where a reader that gave none starts). 'gone' when changes after
 * the position were dropped (retention, an import) or the position was never reached: the reader
 * lists again.
 */
export type ChangesPage = { changes: Change[], next: bigint, from: bigint } | 'gone'

/** Where the change log stands: the last position written, and the last one dropped (older ones are gone). */
export interface LogBounds { head: bigint, floor: bigint }

/** Changes a filtered read of the log passes over at most, per page: it answers with a bookmark past them. */
export const CHANGES_SCAN = 10_000

/** Where a read of the log after `from` starts, or 'gone' if the log no longer holds (or never held) what follows it. */
export function readFrom (after: bigint | undefined, { head, floor }: LogBounds): bigint | 'gone' {
  const from = after ?? floor
  return from < floor || from > head ? 'gone' : from
}

/** The last position a read of the log after `from` looks at: CHANGES_SCAN on, or the head. */
export function scanEnd (from: bigint, head: bigint): bigint {
  const end = from + BigInt(CHANGES_SCAN)
  return end < head ? end : head
}

/**
 * The page of `changes` read after a position up to `end` (scanEnd), at most `limit`: a full page
 * goes on after its last change; any other read everything up to `end`.
 */
export function pageOf (changes: Change[], limit: number, from: bigint, end: bigint): ChangesPage {
  return { changes, next: changes.length === limit ? changes[limit - 1].position : end, from }
}

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
  /**
   * The other instances' part alone, read without writing: for each of the token `ids` that
   * another instance counted since `since`, their total in the window that starts at `start` and
   * how many instances counted it, this one included. For a sync slow to commit (a synchronous
   * standby away): the requests waiting on it are decided on this meanwhile.
   */
  others (instance: string, start: number, since: number, ids: number[]): Promise<Map<number, SharedCount>>
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
  /**
   * Inserts the plant and logs its creation, in one transaction; 'same' (logging nothing) if
   * identical data is already stored under its id, 'conflict' if other data is.
   */
  create (plant: PlantRecord): Promise<Created>
  get (id: bigint): Promise<VersionedPlant | undefined>
  /**
   * Plants ordered by id, only those with an id greater than `after` and the exact `tag` if
   * given; `position` is the log's head in the same snapshot: the page shows exactly the changes up to it.
   */
  list (query: { limit: number, after?: bigint, tag?: string }): Promise<{ plants: PlantRecord[], position: bigint }>
  /**
   * Replaces name and tag (no tag removes it) and logs it, in one transaction, if the plant exists
   * and its version passes `conditions`; else the refusal (refusalOf), decided in the same transaction.
   */
  replace (id: bigint, plant: Plant, conditions?: Conditions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'>
  /** Deletes the plant and logs it, in one transaction, under the same conditions as `replace`; `position` is the deletion's. */
  remove (id: bigint, conditions?: Conditions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'>

  /**
   * Up to `limit` changes after position `after` (from the oldest kept when undefined), in order;
   * with `tag`, only those whose plant carried the tag before or after the change, passing over
   * CHANGES_SCAN changes at most.
   */
  changes (query: { after?: bigint, limit: number, tag?: string }): Promise<ChangesPage>
  /** The log's head and floor. */
  logBounds (): Promise<LogBounds>
  /** Drops up to `batch` of the oldest changes made before `before`, oldest first; answers how many it dropped. */
  pruneChanges (before: Date, batch: number): Promise<number>

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
   * The change log starts anew above its head: every earlier position is gone, and every imported
   * plant's version is the new head.
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

  /** Webhook subscriptions and their deliveries (src/store/webhooks.ts). */
  readonly webhooks: WebhookStore

  /** Counts shared with other instances, when several may run on this store; none for SQLite (one process). */
  readonly rateWindows?: RateWindows

  /**
   * Called after each commit with how many writes it carried, by a store that makes concurrent
   * writes share a commit (SQLite's group commit); PostgreSQL commits each write on its own.
   */
  onCommit?: (writes: number) => void

  /** Resolves when the store can answer queries; throws StoreUnavailableError otherwise. */
  ping (): Promise<void>
  /**
   * Closes the store once the calls under way have ended; `withinMs` bounds its own waits (a lock,
   * a sync), where it has any. Resolves with what the operator should know of how it was left, if
   * anything (SQLite: its last writes in the WAL, not yet in the database file).
   */
  close (withinMs?: number): Promise<string | undefined>
}
