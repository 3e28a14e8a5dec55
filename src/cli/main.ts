#!/usr/bin/env node
import cluster from 'node:cluster'
import { readFileSync } from 'node:fs'
import { ConfigError, loadConfig, settings, type Config } from '../config.js'
import { StoreUnavailableError } from '../errors.js'
import { parseCommand, quoted } from './args.js'
import { backup } from './backup.js'
import { databaseUrlOf, openForCommand } from './database.js'
import { exportPlants } from './export.js'
import { importPlants } from './import.js'
import { tokens } from './tokens.js'
import { flagOf, USAGE } from './usage.js'

/** The version in package.json, one directory above both src/ and dist/. */
function version (): string {
  return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version
}

/** serve's configuration: the environment, with one flag per setting overriding it; undefined for --help. */
function configFrom (args: string[]): Config | undefined {
  const parsed = parseCommand('serve', args, Object.fromEntries(settings.map(s => [flagOf(s.env), { type: 'string' as const }])))
  if (parsed === undefined) return undefined
  const values = parsed.values as Record<string, string | undefined>
  const overrides = Object.fromEntries(settings.flatMap(s => values[flagOf(s.env)] === undefined ? [] : [[s.key, values[flagOf(s.env)] as string]]))
  return loadConfig(process.env, overrides)
}

async function migrate (args: string[]): Promise<void> {
  const parsed = parseCommand('migrate', args, { 'database-url': { type: 'string' } })
  if (parsed === undefined) {
    process.stdout.write(USAGE.migrate + '\n')
    return
  }
  await (await openForCommand(databaseUrlOf(parsed.values['database-url'] as string | undefined))).close()
}

async function serve (args: string[]): Promise<void> {
  const config = configFrom(args)
  if (config === undefined) process.stdout.write(USAGE.serve + '\n')
  // Loaded only to serve: the other commands start without the HTTP stack (Fastify, prom-client).
  else if (config.workers > 1 && cluster.isPrimary) await (await import('../workers.js')).serveWorkers(config)
  else await (await import('../server.js')).serve(config)
}

async function main (argv: string[]): Promise<void> {
  const [command, ...rest] = argv
  if (command === '--version') {
    process.stdout.write(version() + '\n')
    return
  }
  if (command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(USAGE.plantstore + '\n')
    return
  }
  // serve is the default command: none at all, or its flags alone (`plantstore --port 9000`).
  if (command === undefined || command.startsWith('-')) return await serve(argv)
  if (command === 'serve') return await serve(rest)
  if (command === 'migrate') return await migrate(rest)
  if (command === 'tokens') return await tokens(rest)
  if (command === 'backup') return await backup(rest)
  if (command === 'export') return await exportPlants(rest)
  if (command === 'import') return await importPlants(rest)
  throw new ConfigError(`Unknown command ${quoted(command)}; use serve, migrate, tokens, backup, export or import (see plantstore --help).`)
}

// `plantstore tokens list | head -1`: once the reader has gone, the rest of the output has no one
// to read it; stop quietly, as command-line tools do, rather than with a stack trace. Any other
// failure to write it (a full disk) is one line and exit code 1.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit() // with the exit code set already: 1 after a failure
  process.stderr.write(`plantstore: Could not write to stdout: ${error.message}.\n`)
  process.exit(1)
})

main(process.argv.slice(2)).catch((error: unknown) => {
  const message = error instanceof ConfigError
    ? error.message
    : error instanceof StoreUnavailableError ? `The store is unavailable: ${error.message}` : String((error as Error).stack ?? error)
  process.exitCode = 1
  process.stderr.write(`plantstore: ${message}\n`)
  exitOnceWritten()
})

/**
 * Exits (with process.exitCode) once stdout and stderr have written out what they hold. A reader
 * slower than us leaves a pipe full and the rest in our memory, which process.exit drops: a failed
 * export's last line among it, without which an import of its output would succeed. The exit waits
 * OUTPUT_WAIT_MS at most: a reader that never reads does not hold it for ever.
 */
function exitOnceWritten (): void {
  let writing = 2
  const written = (): void => { if (--writing === 0) process.exit() }
  process.stdout.write('', written)
  process.stderr.write('', written)
  setTimeout(() => process.exit(), OUTPUT_WAIT_MS).unref()
}

const OUTPUT_WAIT_MS = 10_000
