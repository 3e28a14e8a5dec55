import { resolve } from 'node:path'
import { isPostgresUrl, loadConfig } from '../config.js'
import { NoStoreHereError, openStore } from '../store/open.js'
import type { Store } from '../store/store.js'

/**
 * The store an operator command works on: `--database-url`, else DATABASE_URL, else the
 * default. Only this setting is read, so that a bad PORT cannot stop `tokens list`.
 */
export function databaseUrlOf (flag: string | undefined): string {
  return loadConfig({ DATABASE_URL: process.env.DATABASE_URL }, flag === undefined ? {} : { databaseUrl: flag }).databaseUrl
}

/**
 * Opens the store for an operator command, creating and migrating it if needed. A store made
 * is said on stderr, where it is (the absolute path; for PostgreSQL, not the URL, which may hold a
 * password): a relative path, a forgotten DATABASE_URL or search_path would otherwise leave tokens
 * in a store that no server reads.
 */
export async function openForCommand (databaseUrl: string): Promise<Store> {
  try {
    return await openStore(databaseUrl, { create: false })
  } catch (error) {
    if (!(error instanceof NoStoreHereError)) throw error
  }
  const store = await openStore(databaseUrl)
  process.stderr.write(isPostgresUrl(databaseUrl)
    ? 'plantstore: there was no store in the PostgreSQL database in DATABASE_URL (its search_path held no plantstore tables), so a new, empty one was made there.\n'
    : `plantstore: there was no store at ${resolve(databaseUrl)}, so a new, empty one was made there (give --database-url or DATABASE_URL to use another).\n`)
  return store
}
