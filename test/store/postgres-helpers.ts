import type pg from 'pg'
import { randomBytes } from 'node:crypto'
import type { TestContext } from 'node:test'
import { queryOnce } from '../../scripts/postgres-query.js'

/** The PostgreSQL server the tests use, from TEST_DATABASE_URL; undefined skips the PostgreSQL tests. */
export const PG_URL = process.env.TEST_DATABASE_URL

/** Why the PostgreSQL tests of a file skip: said once per file. */
export const PG_SKIP = 'TEST_DATABASE_URL is not set (e.g. postgres://postgres@127.0.0.1:5432/test), so the PostgreSQL tests are skipped'

/** Runs `sql` on the test server on a connection of its own. */
export async function adminQuery (sql: string, values: unknown[] = []): Promise<pg.QueryResult> {
  return await queryOnce(PG_URL!, sql, values)
}

/**
 * A new, empty schema of its own for this test, dropped after it; returns the URL whose
 * connections use it (search_path) and its name. `applicationName` tags the connections, so
 * that a test can find (and end) its own.
 */
export async function pgSchema (t: TestContext, applicationName?: string): Promise<{ url: string, schema: string }> {
  const schema = `t_${randomBytes(6).toString('hex')}`
  await adminQuery(`CREATE SCHEMA ${schema}`)
  // A lock left held by a failed test must not hang the run: the drop gives up after a while.
  // A server still running against it (its jobs query every second) can deadlock the drop: try again.
  t.after(async () => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await adminQuery(`SET lock_timeout = '5s'; DROP SCHEMA ${schema} CASCADE`)
      } catch (error) {
        if ((error as { code?: string }).code !== '40P01' || attempt === 5) throw error
      }
    }
  })
  const url = new URL(PG_URL!)
  const params = [`options=${encodeURIComponent(`-c search_path=${schema}`)}`]
  if (applicationName !== undefined) params.push(`application_name=${applicationName}`)
  return { url: `${url.href}${url.search === '' ? '?' : '&'}${params.join('&')}`, schema }
}
