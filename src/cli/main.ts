#!/usr/bin/env node
import cluster from 'node:cluster'
import { readFileSync } from 'node:fs'
import { ConfigError, loadConfig, quoted, settings, type Config } from '../config.js'
import { StoreUnavailableError } from '../errors.js'
import { stopOnSignalsWhileStarting } from '../start-signals.js'
import { parseCommand } from './args.js'
import { exitOnceWritten } from './exit.js'
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
  const { databaseUrlOf, openForCommand } = await import('./database.js')
  await (await openForCommand(databaseUrlOf(parsed.values['database-url'] as string | undefined))).close()
}

async function serve (args: string[]): Promise<void> {
  // Before the server's modules load, which is most of a start's time before it listens.
  stopOnSignalsWhileStarting()
  const config = configFrom(args)
  if (config === undefined) process.stdout.write(USAGE.serve + '\n')
  // Loaded only to serve: the other commands start without the HTTP stack (Fastify, prom-client).
  else if (config.workers > 1 && cluster.isPrimary) await (await import('../workers.js')).serveWorkers(config)
  else await (await import('../server.js')).serve(config)
}

async function main (argv: string[]): Promise<void> {
  const [command, ...rest] = argv
  if (command === '--version') {
    if (rest.length > 0) throw new ConfigError(`--version: unexpected argument ${quoted(rest[0])}; see plantstore --help.`)
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
  // Each command's modules load when it runs: a start that is quick to take a signal.
  if (command === 'tokens') return await (await import('./tokens.js')).tokens(rest)
  if (command === 'backup') return await (await import('./backup.js')).backup(rest)
  if (command === 'export') return await (await import('./export.js')).exportPlants(rest)
  if (command === 'import') return await (await import('./import.js')).importPlants(rest)
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
