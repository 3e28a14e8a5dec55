import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { isPostgresUrl, loadConfig } from '../config.js'
import { openStore } from '../store/open.js'
import type { Store } from '../store/store.js'

/**
 * The store an operator command works on: `--database-url`, else DATABASE_URL, else the
 * default. Only this setting is read, so that a bad PORT cannot stop `tokens list`.
 */
export function databaseUrlOf (flag: string | undefined): string {
  return loadConfig({ DATABASE_URL: process.env.DATABASE_URL }, flag === undefined ? {} : { databaseUrl: flag }).databaseUrl
}

/**
 * Opens the store for an operator command, creating and migrating it if needed. Creating one
 * is said on stderr with the absolute path: a relative path or a forgotten DATABASE_URL would
 * otherwise leave tokens in a store that no server reads.
 */
export async function openForCommand (databaseUrl: string): Promise<Store> {
  if (!isPostgresUrl(databaseUrl) && !existsSync(databaseUrl)) {
    process.stderr.write(`plantstore: no store at ${resolve(databaseUrl)} yet, so a new, empty one is created there (give --database-url or DATABASE_URL to use another).\n`)
  }
  return await openStore(databaseUrl)
}
