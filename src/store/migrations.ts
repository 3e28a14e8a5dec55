import { readdirSync, readFileSync } from 'node:fs'

export interface Migration { version: number, name: string, sql: string }

/** Each kind's migrations, read from disk once a process: they are its own files, not the database's. */
const read = new Map<'sqlite' | 'postgres', readonly Migration[]>()

/** The numbered migrations (`001-name.sql`) of one kind of store, in order. */
export function migrationsOf (kind: 'sqlite' | 'postgres'): readonly Migration[] {
  let migrations = read.get(kind)
  if (migrations === undefined) {
    const dir = new URL(`./migrations/${kind}/`, import.meta.url)
    migrations = readdirSync(dir).filter(file => /^\d+-.+\.sql$/.test(file)).sort().map(file => ({
      version: Number(file.split('-')[0]),
      name: file,
      sql: readFileSync(new URL(file, dir), 'utf8')
    }))
    read.set(kind, migrations)
  }
  return migrations
}

/** The version the newest migration of one kind of store brings a database to. */
export function newestVersion (kind: 'sqlite' | 'postgres'): number {
  return migrationsOf(kind).at(-1)?.version ?? 0
}

/** A database from a newer plantstore: `serve` refuses it rather than guess at its schema. */
export function tooNew (found: number, newest: number): Error {
  return new Error(`The database schema is version ${found}, newer than this plantstore knows (${newest}); upgrade plantstore.`)
}
