import Database from 'better-sqlite3'
import { mkdirSync } from 'node:fs'
import { dirname, extname } from 'node:path'
import { Worker } from 'node:worker_threads'
import { StoreUnavailableError } from '../errors.js'
import { configure, migrate } from './sqlite-schema.js'
import { PLANT_BY_ID_SQL, PLANT_COLUMNS, rowToPlant, rowToToken, type PlantRow, type TokenRow } from './sqlite-rows.js'
import type { Outcome, WriteRequest, WriteResult } from './sqlite-writer.js'
import type { NewToken, Plant, PlantRecord, Store, TokenRecord } from './store.js'

const WRITER = new URL(`./sqlite-writer${extname(import.meta.url)}`, import.meta.url)

/** Built, the writer is plain JS; from source (tests under tsx), the thread must load tsx itself. */
function startWriter (path: string): Worker {
  if (WRITER.pathname.endsWith('.js')) return new Worker(WRITER, { workerData: { path } })
  const bootstrap = `import('tsx/esm/api').then(tsx => { tsx.register(); return import(${JSON.stringify(WRITER.href)}) })`
  return new Worker(bootstrap, { eval: true, workerData: { path } })
}

/** A read's failure as the caller sees it: storage trouble, answered 503. */
function unavailable (error: unknown): StoreUnavailableError {
  return new StoreUnavailableError((error as Error).message)
}

/** A caller waiting for the store: the settling functions of its promise. */
interface Waiter { resolve: (value: unknown) => void, reject: (error: Error) => void }

/** The page queries: keyset pagination on the id (the rowid) or the (tag, id) index, never OFFSET. */
export const LIST_SQL = {
  first: `SELECT ${PLANT_COLUMNS} FROM plants ORDER BY id LIMIT ?`,
  after: `SELECT ${PLANT_COLUMNS} FROM plants WHERE id > ? ORDER BY id LIMIT ?`,
  tagFirst: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? ORDER BY id LIMIT ?`,
  tagAfter: `SELECT ${PLANT_COLUMNS} FROM plants WHERE tag = ? AND id > ? ORDER BY id LIMIT ?`
}

/**
 * The embedded store: one SQLite file in WAL mode. Reads run on this thread (a point query
 * takes microseconds), in batches; writes go to a writer thread that fsyncs before answering.
 */
export class SqliteStore implements Store {
  private readonly db: Database.Database
  private readonly sql
  private worker?: Worker
  private readonly waiting = new Map<number, Waiter>()
  private seq = 0
  /**
   * Writer transactions (one commit, one fsync each) and the writes they carried: writes /
   * transactions is the group-commit factor. Reads and their batches (one snapshot each), likewise.
   */
  readonly stats = { transactions: 0, writes: 0, readBatches: 0, reads: 0 }
  private outbox: WriteRequest[] = []
  private pendingReads: Array<Waiter & { query: () => unknown }> = []
  private closed = false

  /** Opens (creating and migrating if needed) the database file at `path`. */
  constructor (private readonly path: string) {
    mkdirSync(dirname(path), { recursive: true })
    migrate(path)
    this.db = new Database(path, { readonly: true })
    configure(this.db)
    this.sql = {
      getPlant: this.db.prepare(PLANT_BY_ID_SQL).raw(),
      listFirst: this.db.prepare(LIST_SQL.first).raw(),
      listAfter: this.db.prepare(LIST_SQL.after).raw(),
      listTagFirst: this.db.prepare(LIST_SQL.tagFirst).raw(),
      listTagAfter: this.db.prepare(LIST_SQL.tagAfter).raw(),
      findToken: this.db.prepare('SELECT * FROM tokens WHERE digest = ?').safeIntegers(false),
      listTokens: this.db.prepare('SELECT * FROM tokens ORDER BY id').safeIntegers(false),
      ping: this.db.prepare('SELECT 1'),
      begin: this.db.prepare('BEGIN'),
      end: this.db.prepare('COMMIT')
    }
  }

  private writer (): Worker {
    if (this.worker !== undefined) return this.worker
    const worker = startWriter(this.path)
    worker.on('message', (results: WriteResult[]) => {
      this.stats.transactions++
      this.stats.writes += results.length
      for (const [seq, outcome, valueOrMessage] of results) this.settle(seq, outcome, valueOrMessage)
    })
    const lost = (error: Error): void => {
      if (this.worker !== worker) return
      this.worker = undefined // the next write starts a fresh writer
      for (const waiter of this.waiting.values()) waiter.reject(new StoreUnavailableError(`SQLite writer stopped: ${error.message}`))
      this.waiting.clear()
    }
    worker.on('error', lost)
    worker.on('exit', code => lost(new Error(`exit code ${code}`)))
    this.worker = worker
    return worker
  }

  private settle (seq: number, outcome: Outcome, valueOrMessage: unknown): void {
    const waiter = this.waiting.get(seq)
    this.waiting.delete(seq)
    if (outcome === 'done') waiter?.resolve(valueOrMessage)
    else waiter?.reject(outcome === 'unavailable' ? new StoreUnavailableError(valueOrMessage as string) : new Error(valueOrMessage as string))
  }

  private write<T> (op: WriteRequest[1], ...args: unknown[]): Promise<T> {
    const seq = ++this.seq
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(seq, { resolve: resolve as (value: unknown) => void, reject })
      // Writes made in one turn of the event loop travel as one message: fewer messages to
      // clone and wake up for, and the writer sees them together, so they share a commit.
      this.outbox.push([seq, op, args])
      if (this.outbox.length === 1) setImmediate(() => this.send())
    })
  }

  private send (): void {
    const batch = this.outbox
    this.outbox = []
    if (batch.length === 0) return
    if (this.closed) {
      for (const [seq] of batch) this.settle(seq, 'unavailable', 'The store is closed.')
      return
    }
    this.writer().postMessage(batch)
  }

  /**
   * Reads asked for during one turn of the event loop run together at its end (setImmediate),
   * in one read transaction, and their callers resume together. Under load this doubled
   * GET /plants/{id} per CPU second against a read per request (see the README's performance
   * section): each stage (parse, route, query, reply) then runs for many requests in a row, and
   * the replies reach the clients back to back. The snapshot is taken only after every request
   * in the batch was read off its socket, so each read sees every write that was acknowledged
   * before its request arrived, whichever process made it; the next batch takes a new one.
   */
  private read<T> (query: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.pendingReads.push({ query, resolve: resolve as (value: unknown) => void, reject })
      if (this.pendingReads.length === 1) setImmediate(() => this.runReads())
    })
  }

  private runReads (): void {
    const batch = this.pendingReads
    this.pendingReads = []
    if (batch.length === 0) return
    try {
      this.sql.begin.run()
    } catch (error) {
      for (const { reject } of batch) reject(unavailable(error))
      return
    }
    this.stats.readBatches++
    this.stats.reads += batch.length
    try {
      for (const { query, resolve, reject } of batch) {
        try {
          resolve(query())
        } catch (error) {
          reject(unavailable(error))
        }
      }
    } finally {
      if (this.db.inTransaction) this.endReads()
    }
  }

  /** Ends a batch's snapshot. Ending a read hardly fails; if it does, a rollback ends it as well, so the next batch can begin. */
  private endReads (): void {
    try {
      this.sql.end.run()
    } catch {
      this.db.exec('ROLLBACK')
    }
  }

  create (plant: PlantRecord): Promise<'created' | 'same' | 'conflict'> {
    return this.write('create', plant.id, plant.name, plant.tag ?? null)
  }

  get (id: bigint): Promise<PlantRecord | undefined> {
    return this.read(() => {
      const row = this.sql.getPlant.get(id) as PlantRow | undefined
      return row === undefined ? undefined : rowToPlant(row)
    })
  }

  list ({ limit, after, tag }: { limit: number, after?: bigint, tag?: string }): Promise<PlantRecord[]> {
    return this.read(() => {
      const rows = tag === undefined
        ? (after === undefined ? this.sql.listFirst.all(limit) : this.sql.listAfter.all(after, limit))
        : (after === undefined ? this.sql.listTagFirst.all(tag, limit) : this.sql.listTagAfter.all(tag, after, limit))
      return (rows as PlantRow[]).map(rowToPlant)
    })
  }

  replace (id: bigint, plant: Plant): Promise<PlantRecord | undefined> {
    return this.write('replace', id, plant.name, plant.tag ?? null)
  }

  remove (id: bigint): Promise<boolean> {
    return this.write('remove', id)
  }

  createToken (token: NewToken): Promise<TokenRecord | 'name-taken'> {
    return this.write('createToken', token)
  }

  createFirstToken (token: NewToken): Promise<TokenRecord | undefined> {
    return this.write('createFirstToken', token)
  }

  findToken (digest: Buffer): Promise<{ record: TokenRecord, digest: Buffer } | undefined> {
    return this.read(() => {
      const row = this.sql.findToken.get(digest) as (TokenRow & { digest: Buffer }) | undefined
      return row === undefined ? undefined : { record: rowToToken(row), digest: row.digest }
    })
  }

  listTokens (): Promise<TokenRecord[]> {
    return this.read(() => (this.sql.listTokens.all() as TokenRow[]).map(rowToToken))
  }

  revokeToken (nameOrId: string): Promise<TokenRecord | undefined> {
    return this.write('revokeToken', nameOrId)
  }

  async ping (): Promise<void> {
    await this.read(() => this.sql.ping.get())
    await this.write('ping')
  }

  async close (): Promise<void> {
    this.runReads() // reads and writes still waiting for the end of this turn go first
    this.send()
    this.closed = true
    const worker = this.worker
    this.worker = undefined
    if (worker !== undefined) {
      const exited = new Promise(resolve => worker.once('exit', resolve))
      worker.postMessage('close')
      await exited
    }
    this.db.close()
  }
}
