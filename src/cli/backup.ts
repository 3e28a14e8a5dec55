import { ConfigError, isPostgresUrl } from '../config.js'
import { backupSqlite, removePartial } from '../store/sqlite-backup.js'
import { parseCommand } from './args.js'
import { databaseUrlOf } from './database.js'
import { watchForStop } from './exit.js'
import { USAGE } from './usage.js'

/** `plantstore backup FILE`: a consistent copy of a live SQLite store. */
export async function backup (args: string[]): Promise<void> {
  const parsed = parseCommand('backup', args, { 'database-url': { type: 'string' } }, 1)
  if (parsed === undefined) {
    process.stdout.write(USAGE.backup + '\n')
    return
  }
  const [file] = parsed.positionals
  if (file === undefined || file === '') throw new ConfigError('backup needs the FILE to write; see plantstore backup --help.')
  const databaseUrl = databaseUrlOf(parsed.values['database-url'] as string | undefined)
  if (isPostgresUrl(databaseUrl)) throw new ConfigError('backup copies SQLite stores only; for PostgreSQL, use pg_dump.')
  // Stopped part way, it leaves no partial copy behind (a copy made whole before the stop stays).
  const watch = watchForStop(() => { removePartial(file) })
  try {
    await backupSqlite(databaseUrl, file)
  } finally {
    watch.end()
  }
  if (!watch.stopped) process.stderr.write(`Backed up ${databaseUrl} to ${file}.\n`)
}
