// What a database holds, read beside the server rather than over HTTP, so that a test can check
// what a request stored (or did not) the same way on either store.
import { readFileSync } from 'node:fs'
import pg from 'pg'
import { openStore } from '../src/store/open.js'
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

/** Every plant stored in `database`, by id. */
export async function storedPlants (database: Pick<TestDatabase, 'databaseUrl'>): Promise<PlantRecord[]> {
  return await withStore(database, async (store) => {
    const plants: PlantRecord[] = []
    for (;;) {
      const page = await store.list({ limit: 1000, after: plants.at(-1)?.id })
      plants.push(...page)
      if (page.length < 1000) return plants
    }
  })
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
