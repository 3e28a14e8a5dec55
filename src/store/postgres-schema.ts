import type pg from 'pg'
import { sqlstateOf } from './postgres-errors.js'
import { migrationsOf, newestVersion, tooNew } from './migrations.js'

/** The lock rows: `migrate` serialises migrations, `first-token` the first start's token. */
export const LOCKS = { migrate: 'migrate', firstToken: 'first-token' } as const

/**
 * Creates the lock table and its rows if they are missing. Two sessions running `CREATE TABLE IF
 * NOT EXISTS` at once can both miss the table and one then fails on the catalog's unique index
 * (23505), finds it made (42P07) or finds its row type made (42710, `type "schema_lock" already
 * exists`, seen once in the suite): the table exists either way, so the step runs again.
 */
async function ensureLocks (client: pg.ClientBase): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_lock (name text PRIMARY KEY)')
      await client.query('INSERT INTO schema_lock (name) VALUES ($1), ($2) ON CONFLICT (name) DO NOTHING', [LOCKS.migrate, LOCKS.firstToken])
      return
    } catch (error) {
      if (attempt >= 5 || !['23505', '42P07', '42710'].includes(sqlstateOf(error))) throw error
    }
  }
}

/** Thrown by an open that must not create the store, where the database holds none. */
export class NoStoreError extends Error {}

/** Throws NoStoreError unless the connection's search_path holds a plant store (of any version). */
export async function requireStore (client: pg.ClientBase): Promise<void> {
  if (await versionOf(client) === 0) throw new NoStoreError('The database holds no plant store.')
}

/** The schema version the database holds (0 when it has no schema_version table yet). */
async function versionOf (client: pg.ClientBase): Promise<number> {
  const table = await client.query<{ found: string | null }>("SELECT to_regclass('schema_version')::text AS found")
  if (table.rows[0].found === null) return 0
  const row = await client.query<{ version: number | null }>('SELECT max(version)::int AS version FROM schema_version')
  return row.rows[0].version ?? 0
}

/**
 * Creates or upgrades the schema (in the connection's search_path), each migration in its own
 * transaction, recorded in schema_version. Safe when several instances start at once: each
 * migration's transaction first takes the `migrate` lock row (`SELECT … FOR UPDATE`, which
 * works where advisory locks do not), then reads the version again. Refuses a schema from a
 * newer plantstore.
 */
export async function migrate (client: pg.ClientBase): Promise<void> {
  const known = migrationsOf('postgres')
  const newest = newestVersion('postgres')
  // Most starts find the schema current: they read its version and take no lock.
  const found = await versionOf(client)
  if (found > newest) throw tooNew(found, newest)
  if (found === newest) return
  await ensureLocks(client)
  for (const migration of known) {
    await client.query('BEGIN')
    try {
      await client.query('SELECT name FROM schema_lock WHERE name = $1 FOR UPDATE', [LOCKS.migrate])
      await client.query('CREATE TABLE IF NOT EXISTS schema_version (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())')
      const current = await versionOf(client)
      if (current > newest) throw tooNew(current, newest)
      if (migration.version > current) {
        await client.query(migration.sql)
        await client.query('INSERT INTO schema_version (version, name) VALUES ($1, $2)', [migration.version, migration.name])
      }
      await client.query('COMMIT')
    } catch (error) {
      await client.query('ROLLBACK').catch(() => {})
      throw error
    }
  }
}
