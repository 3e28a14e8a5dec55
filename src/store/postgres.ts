import pg from 'pg'
import { StoreUnavailableError } from '../errors.js'
import { describe } from './describe.js'
import { commit, duringCommit } from './postgres-commit.js'
import { cancelStatement } from './postgres-cancel.js'
import { isHostLost, isQueryTimeout, isUnavailable, isUniqueViolation } from './postgres-errors.js'
import { databaseHosts, hostOf, sessionRefusal, type DatabaseHosts, type TargetSession } from './postgres-hosts.js'
import { changesPage, createMany, logBounds, pruneChanges, removePlant, replacePlant } from './postgres-changes.js'
import { batchedCreates } from './postgres-creates.js'
import { LIST_SQL, rowToPlant, TYPES, unstorable, type ListRow, type PlantRow } from './postgres-rows.js'
import { LOCKS, migrate, requireStore } from './postgres-schema.js'
import { exportPostgres, importPostgres } from './postgres-transfer.js'
import { postgresWebhooks } from './postgres-webhooks.js'
import { Slots } from './slots.js'
import type { ChangesPage, Created, ImportOutcome, LogBounds, NewToken, Plant, PlantRecord, RateWindows, Scope, SharedCount, Store, TokenRecord, Conditions, VersionedPlant } from './store.js'

/** How much the store takes on at once; past it, it refuses at once (503) rather than queue without end. */
export interface PostgresLimits {
  /** Writes under way (waiting for a connection or running). */
  writesInFlight: number
  /** Reads under way. */
  readsPending: number
  /** How long an operation may take, from the call to its answer, before it is answered 503, in ms. */
  writeTimeoutMs: number
  /** Connections the pool holds at most. */
  poolSize: number
}

/**
 * Caps like the SQLite store's, and a deadline that lets the answer leave within 2 s (SPEC section
 * 8): 1.5 s for the database, the rest for the request's own work on a busy machine.
 */
export const DEFAULT_PG_LIMITS: PostgresLimits = { writesInFlight: 1024, readsPending: 1024, writeTimeoutMs: 1500, poolSize: 10 }

/**
 * Connections of the pool that writes cannot take: a write may hold its connection past its
 * deadline (a COMMIT waiting for a synchronous standby that is away holds it until the standby
 * answers), and writes retried meanwhile must not leave reads without a connection.
 */
const KEPT_FOR_READS = 2

interface TokenRow { id: bigint, name: string, digest: Buffer, scopes: string, created_at: Date, expires_at: Date | null, revoked_at: Date | null }

function rowToToken (row: TokenRow): TokenRecord {
  return {
    id: Number(row.id),
    name: row.name,
    scopes: row.scopes.split(' ') as Scope[],
    createdAt: row.created_at,
    ...(row.expires_at === null ? {} : { expiresAt: row.expires_at }),
    ...(row.revoked_at === null ? {} : { revokedAt: row.revoked_at })
  }
}

/** A failure as the caller sees it: the database out of reach is 503, anything else (a bug) stays an Error (500). */
function failureOf (error: unknown): Error {
  if (error instanceof StoreUnavailableError) return error
  return isUnavailable(error) ? new StoreUnavailableError(describe(error), 'unavailable', duringCommit(error)) : new Error(describe(error))
}

/**
 * One sync of the rate limit's counts, in one statement for all tokens: this instance's counts
 * are upserted (a count only rises), and per token the other instances' counts in the window
 * are added and the instances seen since `$5` counted. The outer query reads the table as it was
 * before the upsert, so this instance's rows are left out there and its new counts come from
 * RETURNING.
 */
const SYNC_SQL = `WITH mine AS (
  INSERT INTO rate_windows (token_id, window_start, instance_id, requests)
  SELECT sent.token_id, $1::int8, $2, sent.requests FROM unnest($3::int8[], $4::int8[]) AS sent (token_id, requests)
  ON CONFLICT (token_id, window_start, instance_id) DO UPDATE SET requests = greatest(rate_windows.requests, excluded.requests)
  RETURNING token_id, requests
)
SELECT mine.token_id, mine.requests + coalesce(sum(other.requests) FILTER (WHERE other.window_start = $1::int8), 0)::int8 AS total,
  1 + count(DISTINCT other.instance_id) AS instances
FROM mine LEFT JOIN rate_windows other
  ON other.token_id = mine.token_id AND other.window_start BETWEEN $5::int8 AND $1::int8 AND other.instance_id <> $2
GROUP BY mine.token_id, mine.requests`

/** The other instances' part of SYNC_SQL's answer, for the token ids `$3`: a read, no commit to wait for. */
const OTHERS_SQL = `SELECT token_id, coalesce(sum(requests) FILTER (WHERE window_start = $1::int8), 0)::int8 AS total,
  1 + count(DISTINCT instance_id) AS instances
FROM rate_windows WHERE token_id = ANY($3::int8[]) AND window_start BETWEEN $4::int8 AND $1::int8 AND instance_id <> $2
GROUP BY token_id`

/** Every connection's settings for `url`, the pool's and those of its own: int8 as bigint, the connect within the deadline, TCP keepalive. */
function connectionConfig (url: string, limits: PostgresLimits): pg.ClientConfig {
  return {
    connectionString: url,
    types: TYPES,
    connectionTimeoutMillis: limits.writeTimeoutMs,
    // Connections whose peer has vanished are found without a query; the probes also keep
    // firewalls and NATs from forgetting a quiet connection.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
    application_name: 'plantstore'
  }
}

/** How long a statement's reply is waited for (node-postgres's query_timeout): a second past the deadline, so that PostgreSQL's own statement timeout comes first. */
const replyTimeoutMs = (limits: PostgresLimits): number => limits.writeTimeoutMs + 1000

/** The pool's settings for `url`: its connections' own, plus statement and reply timeouts within the deadline. */
function poolConfig (url: string, limits: PostgresLimits, target: TargetSession): pg.PoolConfig {
  return {
    ...connectionConfig(url, limits),
    max: limits.poolSize,
    // Waiting for a connection, opening one, a statement in the server, and a reply on the
    // socket are each bounded by the deadline; the store's own timer answers at the deadline
    // whatever is still under way. A connection that stops answering (a network that drops
    // everything, with no reset) is only noticed by query_timeout, which drops it from the pool.
    statement_timeout: limits.writeTimeoutMs,
    // A session that stops mid-transaction (its client gone silent) must not hold the change
    // log's head, which every plant write waits for, until TCP notices: PostgreSQL ends it.
    idle_in_transaction_session_timeout: limits.writeTimeoutMs,
    query_timeout: replyTimeoutMs(limits),
    idleTimeoutMillis: 30_000,
    // pg-pool hands a new connection out once this is done. COMMIT's warnings must reach us
    // (commit), whatever the role or database set. And the host must still be one to write to: a
    // primary demoted while its connections were idle (they end with it) takes new ones as a
    // standby, and reads there would be stale; refused as a write would be, it starts a search.
    onConnect: async (client) => {
      await client.query('SET client_min_messages TO warning')
      const refusal = await sessionRefusal(client, target)
      if (refusal !== undefined) throw Object.assign(new Error(`The database host ${hostOf(url)} ${refusal}.`), { code: READ_ONLY_SQL_TRANSACTION })
    }
  }
}

/**
 * Closes `client`'s connection at once, whatever it waits for (a COMMIT's reply from a host gone
 * silent, or one waiting for a synchronous standby): its query fails, its outcome unknown. Never a
 * cancel (postgres-commit.ts). node-postgres has no public way to: its socket is destroyed.
 */
function cut (client: pg.PoolClient): void {
  (client as unknown as { connection: { stream: { destroy: () => void } } }).connection.stream.destroy()
}

/** The SQLSTATE of a write refused by a host that takes none (a standby): a failover under way. */
const READ_ONLY_SQL_TRANSACTION = '25006'

/** A new pool on the host `url` names; an idle connection the server drops emits 'error' on it, which must not end the process. */
function newPool (url: string, limits: PostgresLimits, target: TargetSession): pg.Pool {
  const pool = new pg.Pool(poolConfig(url, limits, target))
  pool.on('error', () => {}) // the pool removes that connection and opens another when needed
  // A connection dropped because its statement outlived query_timeout: the session may still be
  // running it (an autocommit write waiting for an absent synchronous standby); it is cancelled,
  // not left holding one of the server's connection slots.
  pool.on('release', (error: Error | undefined, client: pg.PoolClient) => {
    if (error !== undefined && isQueryTimeout(error)) cancelStatement(client)
  })
  return pool
}

/** The refusal of every call while the store looks for the host to write to. */
const searchingError = (): StoreUnavailableError => new StoreUnavailableError('The database host was lost; the store is looking for the one to write to.')

/** How long a search for the primary waits between two rounds of its hosts. */
const SEARCH_PAUSE_MS = 250

/**
 * The URL of the first host in `hosts` (in order) that takes connections and offers the session
 * asked for (src/store/postgres-hosts.ts); an error saying why each did not, when none does.
 */
async function findHost (hosts: DatabaseHosts, limits: PostgresLimits): Promise<string> {
  const refusals: string[] = []
  for (const url of hosts.urls) {
    // A host that takes the connection and then stops answering is passed over within the deadline.
    const client = new pg.Client({ ...connectionConfig(url, limits), query_timeout: limits.writeTimeoutMs })
    client.on('error', () => {})
    try {
      await client.connect()
      const refusal = await sessionRefusal(client, hosts.target)
      if (refusal === undefined) return url
      refusals.push(`${hostOf(url)} ${refusal}`)
    } catch (error) {
      refusals.push(`${hostOf(url)}: ${describe(error)}`)
    } finally {
      await client.end().catch(() => {})
    }
  }
  throw new StoreUnavailableError(`No database host takes writes (${refusals.join('; ')}).`)
}

/**
 * The PostgreSQL store: a pool of node-postgres connections to the host to write to. Every
 * operation is one statement in autocommit, or one short transaction; COMMIT returns once the
 * change is durable (`synchronous_commit = on`, PostgreSQL's default, and the synchronous standby
 * when one is named), so its answer may go out at once. Reads and writes are bounded
 * (`PostgresLimits`): past a cap, and past the deadline, the caller gets StoreUnavailableError
 * (503). Connections that fail are dropped and the pool opens new ones. When the host is lost
 * or stops taking writes (a failover: isHostLost), the store answers 503 at once while it looks
 * for the host to write to among DATABASE_URL's, and carries on there (SPEC section 10).
 */
export class PostgresStore implements Store {
  /** The pool on the host written to now, and that host's URL. */
  private pool: pg.Pool
  private url: string
  /** A search for the host to write to, under way. */
  private searching?: Promise<void>
  /** Operations are answered 503 at once while the search runs: the host was lost, not only slow to answer (search). */
  private refusing = false
  /** Told when a search starts (the host lost) and when it ends (the host now written to, and how long it took): the server logs both. */
  onSearch?: (event: { lost: string } | { slow: string } | { found: string, ms: number }) => void
  private readonly limits: PostgresLimits
  private writes = 0
  private reads = 0
  private closed = false
  /** Held by each write while it has a connection of the pool, or an autocommit statement under way. */
  private readonly writers: Slots
  /** The connections taken for transactions (withClient), until given back, by the pool each came from. */
  private readonly checkedOut = new Map<pg.PoolClient, pg.Pool>()

  readonly rateWindows: RateWindows = {
    sync: (instance, start, since, counts) => this.autocommit(async () => {
      const { rows } = await this.query<{ token_id: bigint, total: bigint, instances: bigint }>(SYNC_SQL, [start, instance, [...counts.keys()], [...counts.values()], since])
      return new Map<number, SharedCount>(rows.map(row => [Number(row.token_id), { total: Number(row.total), instances: Number(row.instances) }]))
    }),
    others: (instance, start, since, ids) => this.run('reads', async () => {
      const { rows } = await this.query<{ token_id: bigint, total: bigint, instances: bigint }>(OTHERS_SQL, [start, instance, ids, since])
      return new Map<number, SharedCount>(rows.map(row => [Number(row.token_id), { total: Number(row.total), instances: Number(row.instances) }]))
    }),
    forget: (before) => this.autocommit(async () => { await this.query('DELETE FROM rate_windows WHERE window_start < $1::int8', [before]) })
  }

  readonly webhooks = postgresWebhooks(
    // Its reads (SELECTs only: they hold no write slot) count with the writes, as the dispatcher's work.
    work => this.run('writes', () => work((text, values) => this.query(text, values))),
    work => this.run('writes', answered => this.transaction(client => work((text, values) => client.query(text, values)), answered)))

  /**
   * Creates share transactions (src/store/postgres-creates.ts). A batch runs on the pool in use
   * when it begins, which may be newer than the one its creates' run() saw (a move since): its
   * host lost starts a search of its own, which run() would take for an old pool's failure.
   */
  private readonly batchedCreate = batchedCreates(async (plants) => {
    const pool = this.pool
    try {
      return await this.withClient(client => createMany(client, plants))
    } catch (error) {
      this.lost(pool, error)
      throw error
    }
  })

  private constructor (private readonly hosts: DatabaseHosts, url: string, limits: PostgresLimits) {
    this.limits = limits
    this.url = url
    this.pool = newPool(url, limits, hosts.target)
    this.writers = new Slots(Math.max(1, limits.poolSize - KEPT_FOR_READS), limits.writeTimeoutMs,
      () => new StoreUnavailableError(`No connection was free for a write within ${limits.writeTimeoutMs} ms.`, 'deadline'))
  }

  /**
   * Connects to the database `url` names (the host to write to, of several) and creates or
   * migrates its schema; with `create: false`, a database that holds no store is a NoStoreError,
   * and nothing is created in it.
   */
  static async open (url: string, limits: Partial<PostgresLimits> = {}, { create = true }: { create?: boolean } = {}): Promise<PostgresStore> {
    const hosts = databaseHosts(url)
    const full = { ...DEFAULT_PG_LIMITS, ...limits }
    const store = new PostgresStore(hosts, hosts.urls.length === 1 && hosts.target === 'any' ? hosts.urls[0] : await findHost(hosts, full), full)
    // Migrations run on a connection of their own, without the statement timeout: waiting for
    // another instance's migration is part of starting.
    let client: pg.Client | undefined
    try {
      client = await store.connectAlone()
      if (!create) await requireStore(client)
      await migrate(client)
    } catch (error) {
      await store.pool.end().catch(() => {})
      throw error
    } finally {
      await client?.end().catch(() => {})
    }
    return store
  }

  /**
   * A connection outside the pool and without the statement timeout, for work that is long by
   * nature: migrations, exports, imports. The caller ends it.
   */
  private async connectAlone (): Promise<pg.Client> {
    if (this.refusing) throw searchingError()
    // Keepalive probes find a peer that vanished without a reset: these statements have no timeout.
    const client = new pg.Client(connectionConfig(this.url, this.limits))
    client.on('error', () => {}) // a query under way fails by itself; the error event alone would end the process
    try {
      await client.connect()
    } catch (error) {
      await client.end().catch(() => {})
      throw error
    }
    return client
  }

  /**
   * Runs `work` within the caps and the deadline. Past the deadline the caller is answered 503;
   * the work may still complete (a write then stored: an identical retry answers 'same'), and it
   * counts against the cap until it does. `work` is told whether its caller was answered so: a
   * transaction (`transaction`) then rolls back rather than commit, and a create not yet begun
   * is dropped (postgres-creates.ts).
   */
  private run<T> (kind: 'writes' | 'reads', work: (answered: () => boolean) => Promise<T>): Promise<T> {
    if (this.closed) return Promise.reject(new StoreUnavailableError('The store is closed.'))
    if (this.refusing) return Promise.reject(searchingError())
    const cap = kind === 'writes' ? this.limits.writesInFlight : this.limits.readsPending
    if (this[kind] >= cap) return Promise.reject(new StoreUnavailableError(`${cap} ${kind} are in flight, as many as the store takes on.`, 'capacity'))
    this[kind]++
    let answered = false
    const pool = this.pool
    const done = work(() => answered).finally(() => { this[kind]-- })
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        answered = true
        reject(new StoreUnavailableError(`The database did not answer within ${this.limits.writeTimeoutMs} ms.`, 'deadline', kind === 'writes'))
      }, this.limits.writeTimeoutMs)
      done.then(value => { clearTimeout(timer); resolve(value) }, error => {
        clearTimeout(timer)
        this.lost(pool, error)
        reject(failureOf(error))
      })
    })
  }

  /** A write outside a transaction (withClient holds the slot for those inside one): within the caps, the deadline and the writes' share of the pool. */
  private autocommit<T> (work: () => Promise<T>): Promise<T> {
    return this.run('writes', () => this.writers.hold(work))
  }

  private async query<R extends pg.QueryResultRow> (text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    return await this.pool.query<R>(text, values)
  }

  /**
   * Runs write `work` on one connection of the pool, within the writes' share of it. A connection
   * that failed is dropped from the pool rather than handed to the next caller; dropping it rolls
   * back a transaction left open.
   */
  private async withClient<T> (work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return await this.writers.hold(async () => {
      const pool = this.pool
      const client = await pool.connect()
      this.checkedOut.set(client, pool)
      let broken: Error | undefined
      // A checked-out client has no 'error' listener of the pool's: a connection lost now would
      // emit 'error' to no one, which ends the process. Its queries fail all the same.
      const lost = (error: Error): void => { broken = error }
      client.on('error', lost)
      try {
        return await work(client)
      } catch (error) {
        // After any failure that answers 503 (a lost or silent connection, a timeout, a serialization
        // failure) the connection is dropped, which rolls back, rather than sent a ROLLBACK: on one that
        // stopped answering, the ROLLBACK would wait out query_timeout again. Rare; the pool reconnects.
        if (isUnavailable(error) || error instanceof StoreUnavailableError) broken ??= error as Error
        else await client.query('ROLLBACK').catch((rollback: Error) => { broken = rollback })
        throw error
      } finally {
        client.off('error', lost)
        this.checkedOut.delete(client)
        client.release(broken)
      }
    })
  }

  /**
   * Runs `work` in one transaction on one connection (see withClient). When its caller was
   * `answered` 503 already, it rolls back: what the caller was told failed does not happen then
   * (unless the deadline passes while COMMIT is under way).
   */
  private async transaction<T> (work: (client: pg.PoolClient) => Promise<T>, answered: () => boolean = () => false): Promise<T> {
    return await this.withClient(async (client) => {
      await client.query('BEGIN')
      const result = await work(client)
      if (answered()) throw new StoreUnavailableError('The caller was answered before the transaction ended: rolled back.', 'deadline')
      await commit(client)
      return result
    })
  }

  create (plant: PlantRecord): Promise<Created> {
    const refused = unstorable(plant)
    if (refused !== undefined) return Promise.reject(refused)
    return this.run('writes', answered => this.batchedCreate(plant, answered))
  }

  get (id: bigint): Promise<VersionedPlant | undefined> {
    return this.run('reads', async () => {
      const { rows } = await this.query<PlantRow & { version: bigint }>('SELECT id, name, tag, version FROM plants WHERE id = $1::int8', [id.toString()])
      return rows.length === 0 ? undefined : { plant: rowToPlant(rows[0]), version: rows[0].version }
    })
  }

  list ({ limit, after, tag }: { limit: number, after?: bigint, tag?: string }): Promise<{ plants: PlantRecord[], position: bigint }> {
    return this.run('reads', async () => {
      // No stored tag holds U+0000, which PostgreSQL refuses as a parameter: no row is asked for.
      const rows = tag?.includes('\u0000') === true
        ? (await this.query<ListRow>(LIST_SQL.first, [0])).rows
        : tag === undefined
          ? (after === undefined ? await this.query<ListRow>(LIST_SQL.first, [limit]) : await this.query<ListRow>(LIST_SQL.after, [after.toString(), limit])).rows
          : (after === undefined ? await this.query<ListRow>(LIST_SQL.tagFirst, [tag, limit]) : await this.query<ListRow>(LIST_SQL.tagAfter, [tag, after.toString(), limit])).rows
      return { plants: rows.filter(row => row.id !== null).map(row => rowToPlant(row as PlantRow)), position: rows[0].position }
    })
  }

  replace (id: bigint, plant: Plant, conditions?: Conditions): Promise<VersionedPlant | 'not-found' | 'precondition-failed'> {
    const refused = unstorable(plant)
    if (refused !== undefined) return Promise.reject(refused)
    return this.run('writes', () => this.withClient(client => replacePlant(client, id, plant, conditions)))
  }

  remove (id: bigint, conditions?: Conditions): Promise<{ position: bigint } | 'not-found' | 'precondition-failed'> {
    return this.run('writes', () => this.withClient(client => removePlant(client, id, conditions)))
  }

  changes (query: { after?: bigint, limit: number, tag?: string }): Promise<ChangesPage> {
    return this.run('reads', () => changesPage(this.pool, query))
  }

  logBounds (): Promise<LogBounds> {
    return this.run('reads', () => logBounds(this.pool))
  }

  pruneChanges (before: Date, batch: number): Promise<number> {
    return this.autocommit(() => pruneChanges(this.pool, before, batch))
  }

  createToken (token: NewToken): Promise<TokenRecord | 'name-taken'> {
    return this.run('writes', async (answered) => {
      try {
        return await this.transaction(async (client) => {
          const now = new Date()
          // An expired token keeps its row but frees its name, in the same transaction as the insert.
          await client.query('UPDATE tokens SET revoked_at = expires_at WHERE name = $1 AND revoked_at IS NULL AND expires_at <= $2', [token.name, now])
          const { rows } = await client.query<TokenRow>(
            'INSERT INTO tokens (name, digest, scopes, created_at, expires_at) VALUES ($1, $2, $3, $4, $5) ON CONFLICT (name) WHERE revoked_at IS NULL DO NOTHING RETURNING *',
            [token.name, token.digest, token.scopes.join(' '), now, token.expiresAt ?? null])
          return rows.length === 0 ? 'name-taken' as const : rowToToken(rows[0])
        }, answered)
      } catch (error) {
        if (isUniqueViolation(error)) return 'name-taken'
        throw error
      }
    })
  }

  createFirstToken (token: NewToken): Promise<TokenRecord | undefined> {
    return this.run('writes', async (answered) => await this.transaction(async (client) => {
      // The lock row makes instances that start together take turns: the second sees the first's token.
      await client.query('SELECT name FROM schema_lock WHERE name = $1 FOR UPDATE', [LOCKS.firstToken])
      const { rows } = await client.query<TokenRow>(
        'INSERT INTO tokens (name, digest, scopes, created_at, expires_at) SELECT $1, $2, $3, $4, $5 WHERE NOT EXISTS (SELECT 1 FROM tokens) RETURNING *',
        [token.name, token.digest, token.scopes.join(' '), new Date(), token.expiresAt ?? null])
      return rows.length === 0 ? undefined : rowToToken(rows[0])
    }, answered))
  }

  findToken (digest: Buffer): Promise<{ record: TokenRecord, digest: Buffer } | undefined> {
    return this.run('reads', async () => {
      const { rows } = await this.query<TokenRow>('SELECT * FROM tokens WHERE digest = $1', [digest])
      return rows.length === 0 ? undefined : { record: rowToToken(rows[0]), digest: rows[0].digest }
    })
  }

  listTokens (): Promise<TokenRecord[]> {
    return this.run('reads', async () => (await this.query<TokenRow>('SELECT * FROM tokens ORDER BY id')).rows.map(rowToToken))
  }

  revokeToken (nameOrId: string): Promise<TokenRecord | undefined> {
    // A transaction, so that its COMMIT is checked (commit): a revocation lost in a failover must not be answered as done.
    return this.run('writes', async (answered) => await this.transaction(async (client) => {
      const now = new Date()
      // A token that expired is kept as revoked at its expiry, as when its name is taken again.
      const byName = await client.query<TokenRow>('UPDATE tokens SET revoked_at = least(expires_at, $1) WHERE name = $2 AND revoked_at IS NULL RETURNING *', [now, nameOrId])
      if (byName.rows.length > 0) return rowToToken(byName.rows[0])
      if (!/^\d{1,18}$/.test(nameOrId)) return undefined
      const byId = await client.query<TokenRow>('UPDATE tokens SET revoked_at = coalesce(revoked_at, least(expires_at, $1)) WHERE id = $2::int8 RETURNING *', [now, nameOrId])
      return byId.rows.length === 0 ? undefined : rowToToken(byId.rows[0])
    }, answered))
  }

  exportPlants (): AsyncIterable<PlantRecord[]> {
    return exportPostgres(() => this.connectAlone())
  }

  importPlants (source: AsyncIterable<PlantRecord[]>, options: { replace: boolean }): Promise<ImportOutcome> {
    return importPostgres(() => this.connectAlone(), source, options)
  }

  /**
   * Ready means writes can succeed: a host that takes none (a standby, a primary demoted or made
   * read-only) is not ready, and the store looks for one that does, as a failed write would (a
   * probe may be all that reaches an instance its balancer has taken out of rotation).
   */
  async ping (): Promise<void> {
    const pool = this.pool
    const { rows } = await this.run('reads', async () => await this.query<{ readOnly: string }>('SELECT current_setting(\'transaction_read_only\') AS "readOnly"'))
    if (rows[0]?.readOnly === 'on') {
      this.search(pool)
      throw new StoreUnavailableError('The database host takes no writes now: a standby, or a primary made read-only.')
    }
  }

  /**
   * After a failure on `pool`: the host lost starts a search. A statement that got no answer in
   * time (query_timeout) may be the host gone silent, or only slow: its search serves operations
   * meanwhile.
   */
  private lost (pool: pg.Pool, error: unknown): void {
    if (isHostLost(error)) this.search(pool, !isQueryTimeout(error))
  }

  /**
   * Looks for the host to write to, once at a time, round after round of DATABASE_URL's hosts
   * until one answers (or the store closes), and moves there with a new pool; the old pool's
   * connections go. When the host is `certainly` lost, operations are answered 503 meanwhile
   * (run); otherwise they go on where they are. Only a failure on the pool in use starts a
   * search: those of the old pool's calls, ending after the move, are its past.
   */
  private search (failed: pg.Pool, certainly = true): void {
    // One host taken as it is (`any`): nothing to choose; the pool drops the failed connection and opens others, as ever.
    if (this.hosts.urls.length === 1 && this.hosts.target === 'any') return
    if (this.closed || failed !== this.pool) return
    if (certainly) this.refusing = true
    if (this.searching !== undefined) return
    const started = Date.now()
    this.tell(certainly ? { lost: hostOf(this.url) } : { slow: hostOf(this.url) })
    this.searching = (async () => {
      while (!this.closed) {
        try {
          const found = await findHost(this.hosts, this.limits)
          // The same host (a connection lost, the host still the one): the pool stays, only its failed connections went.
          if (found !== this.url) {
            // Not awaited: its connections in use end as their work fails or finishes. Those of
            // transactions still under way a reply timeout later are cut: a COMMIT there would wait
            // for a host gone silent as long as TCP retransmits (about 15 minutes), holding its slot.
            const old = this.pool
            old.end().catch(() => {})
            setTimeout(() => { this.cutTransactions(old) }, replyTimeoutMs(this.limits)).unref()
            this.url = found
            this.pool = newPool(found, this.limits, this.hosts.target)
          }
          this.tell({ found: hostOf(found), ms: Date.now() - started })
          return
        } catch {
          await new Promise(resolve => setTimeout(resolve, SEARCH_PAUSE_MS))
        }
      }
    })().finally(() => {
      this.searching = undefined
      this.refusing = false
    })
  }

  /** Cuts the connections of the transactions still under way (on `pool`, if given): their outcome unknown, never cancelled. */
  private cutTransactions (pool?: pg.Pool): void {
    for (const [client, from] of this.checkedOut) if (pool === undefined || from === pool) cut(client)
  }

  /** Tells onSearch, whose failures are not the store's. */
  private tell (event: Parameters<NonNullable<PostgresStore['onSearch']>>[0]): void {
    try { this.onSearch?.(event) } catch {}
  }

  /**
   * Refuses new calls, lets those under way finish, and closes the pool's connections. A COMMIT
   * still waiting for a synchronous standby that is away after `withinMs` has its connection
   * closed under it (never cancelled: postgres-commit.ts), its outcome unknown.
   */
  close (withinMs = this.limits.writeTimeoutMs): Promise<undefined> {
    this.closed = true
    this.closing ??= (async () => {
      const late = setTimeout(() => { this.cutTransactions() }, Math.max(0, withinMs))
      await this.searching
      await this.pool.end().catch(() => {})
      clearTimeout(late)
      return undefined
    })()
    return this.closing
  }

  private closing?: Promise<undefined>
}
