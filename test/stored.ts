// What a database holds, read beside the server rather than over HTTP, so that a test can check
// what a request stored (or did not) the same way on either store.
import { openDatabase } from '../src/store/sqlite-driver.js'
import { readFileSync } from 'node:fs'
import pg from 'pg'
import { queryOnce } from '../scripts/postgres-query.js'
import { openStore } from '../src/store/open.js'
import assert from 'node:assert/strict'
import type { PlantRecord, Store } from '../src/store/store.js'
import type { TestContext } from 'node:test'
import { freshDatabase, type StoreKind, type TestDatabase } from './helpers.js'

/** Runs `work` on a store of the test's own, opened on `database` and closed after. */
export async function withStore<T> (database: Pick<TestDatabase, 'databaseUrl'>, work: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(database.databaseUrl)
  try {
    return await work(store)
  } finally {
    await store.close()
  }
}

/** A new, empty store of `kind`, opened in this process as the server opens it, closed after the test. */
export async function openTestStore (t: TestContext, kind: StoreKind): Promise<Store> {
  const store = await openStore((await freshDatabase(t, kind)).databaseUrl)
  t.after(() => store.close())
  return store
}

/** The plant a replace answered, failing the test when it answered that it found none or a condition failed. */
export function plantOf (replaced: Awaited<ReturnType<Store['replace']>>): PlantRecord {
  assert.ok(typeof replaced === 'object', `replace answered ${String(replaced)}`)
  return replaced.plant
}

/** Every plant stored in `database`, by id. */
export async function storedPlants (database: Pick<TestDatabase, 'databaseUrl'>): Promise<PlantRecord[]> {
  return await withStore(database, async (store) => {
    const plants: PlantRecord[] = []
    for (;;) {
      const page = await store.list({ limit: 1000, after: plants.at(-1)?.id })
      plants.push(...page.plants)
      if (page.plants.length < 1000) return plants
    }
  })
}

/**
 * Every plant stored in `database`, in id order, read with SQL rather than through the store that
 * wrote it: so that a test sees the stored int8 itself, not what the store's own reading makes of it.
 */
export async function plantsBySql (database: TestDatabase): Promise<PlantRecord[]> {
  let rows: Array<{ id: bigint | string, name: string, tag: string | null }>
  if (database.store === 'sqlite') {
    const db = openDatabase(database.databaseUrl, { readonly: true })
    try {
      rows = db.prepare('SELECT id, name, tag FROM plants ORDER BY id').safeIntegers(true).all() as typeof rows
    } finally {
      db.close()
    }
  } else {
    // Ordered by the int8, not by its text.
    rows = (await queryOnce(database.databaseUrl, 'SELECT id::text AS id, name, tag FROM plants ORDER BY plants.id')).rows
  }
  return rows.map(({ id, name, tag }) => tag === null ? { id: BigInt(id), name } : { id: BigInt(id), name, tag })
}

/** Runs one SQL statement on `database` beside whatever has it open, and answers the rows it returns. */
export async function sqlOnce (database: TestDatabase, text: string): Promise<unknown[]> {
  if (database.store === 'postgres') return (await queryOnce(database.databaseUrl, text)).rows
  const db = openDatabase(database.databaseUrl)
  try {
    const statement = db.prepare(text)
    if (statement.reader) return statement.all()
    statement.run()
    return []
  } finally {
    db.close()
  }
}

/**
 * Everything `database` holds, as bytes to search: the SQLite file with its -wal and -shm, or
 * every row of every table in the PostgreSQL schema as text (what a dump of it would show).
 */
export async function databaseContents (database: TestDatabase): Promise<Buffer> {
  if (database.store === 'sqlite') {
    return Buffer.concat(['', '-wal', '-shm'].flatMap(suffix => {
      try { return [readFileSync(database.databaseUrl + suffix)] } catch { return [] }
    }))
  }
  const client = new pg.Client({ connectionString: database.databaseUrl })
  await client.connect()
  try {
    const tables = await client.query<{ name: string }>('SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()')
    const rows = await Promise.all(tables.rows.map(({ name }) => client.query<{ row: string }>(`SELECT t::text AS row FROM ${client.escapeIdentifier(name)} t`)))
    return Buffer.from(rows.flatMap(result => result.rows.map(({ row }) => row)).join('\n'))
  } finally {
    await client.end()
  }
}
