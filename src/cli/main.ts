#!/usr/bin/env node
import { setTimeout as sleep } from 'node:timers/promises'
import { parseArgs } from 'node:util'
import { ConfigError, loadConfig, settings, type Config } from '../config.js'
import { serve } from '../server.js'
import { openStore } from '../store/open.js'
import { DEFAULT_SCOPES, type Scope, type TokenRecord } from '../store/store.js'
import { digestOf, generateToken, isScope, parseDuration, TOKEN_CACHE_MS } from '../tokens.js'

const USAGE = `Usage:
  plantstore serve [--port N] [--host ADDR] [--database-url URL] [--log-level L] [--rate-limit-per-minute N]
  plantstore migrate
  plantstore tokens create --name NAME [--scope S]... [--expires-in 30d]
  plantstore tokens list
  plantstore tokens revoke NAME_OR_ID

Settings come from the environment (${settings.map(s => s.env).join(', ')}); serve's flags override them.
Scopes: plants:read, plants:write, admin (default: plants:read and plants:write).`

/** `--port` and the rest: one flag per setting, named after its environment variable. */
const flagOf = (env: string): string => env.toLowerCase().replaceAll('_', '-')

function configFrom (args: string[]): Config {
  const { values } = parseArgs({
    args,
    options: Object.fromEntries(settings.map(s => [flagOf(s.env), { type: 'string' as const }]))
  })
  const overrides = Object.fromEntries(settings.flatMap(s => values[flagOf(s.env)] === undefined ? [] : [[s.key, values[flagOf(s.env)] as string]]))
  return loadConfig(process.env, overrides)
}

function describeToken (token: TokenRecord): string {
  const state = token.revokedAt !== undefined
    ? `revoked ${token.revokedAt.toISOString()}`
    : token.expiresAt !== undefined && token.expiresAt.getTime() <= Date.now() ? `expired ${token.expiresAt.toISOString()}` : 'active'
  const expires = token.expiresAt === undefined ? 'never expires' : `expires ${token.expiresAt.toISOString()}`
  return `${token.id}\t${token.name}\t${token.scopes.join(',')}\t${state}\tcreated ${token.createdAt.toISOString()}\t${expires}`
}

async function tokens (args: string[]): Promise<void> {
  const [action, ...rest] = args
  const store = openStore(loadConfig().databaseUrl)
  try {
    if (action === 'create') {
      const { values } = parseArgs({ args: rest, options: { name: { type: 'string' }, scope: { type: 'string', multiple: true }, 'expires-in': { type: 'string' } } })
      if (values.name === undefined || values.name.trim() === '') throw new ConfigError('tokens create needs --name NAME.')
      const scopes = values.scope ?? DEFAULT_SCOPES
      const unknown = scopes.find(scope => !isScope(scope))
      if (unknown !== undefined) throw new ConfigError(`Unknown scope "${unknown}"; use plants:read, plants:write or admin.`)
      let expiresAt: Date | undefined
      if (values['expires-in'] !== undefined) {
        const lifetime = parseDuration(values['expires-in'])
        if (lifetime === undefined) throw new ConfigError(`--expires-in takes a number and a unit (s, m, h, d, w), such as 30d, not "${values['expires-in']}".`)
        expiresAt = new Date(Date.now() + lifetime)
      }
      const token = generateToken()
      const created = await store.createToken({ name: values.name, digest: digestOf(token), scopes: [...new Set(scopes)] as Scope[], expiresAt })
      if (created === 'name-taken') throw new ConfigError(`An active token is already named "${values.name}"; revoke it or choose another name.`)
      process.stdout.write(token + '\n') // alone on stdout, so that TOKEN=$(plantstore tokens create …) works
      process.stderr.write(`Created token ${created.id} "${created.name}" (${created.scopes.join(', ')}). It is shown only this once.\n`)
    } else if (action === 'list') {
      for (const token of await store.listTokens()) process.stdout.write(describeToken(token) + '\n')
    } else if (action === 'revoke') {
      if (rest.length !== 1) throw new ConfigError('tokens revoke takes one NAME_OR_ID.')
      const revoked = await store.revokeToken(rest[0])
      if (revoked === undefined) throw new ConfigError(`No active token is named "${rest[0]}" and none has that id.`)
      // Running servers may answer from a lookup made just before; once this returns, none does.
      await sleep(TOKEN_CACHE_MS + 100)
      process.stderr.write(`Revoked token ${revoked.id} "${revoked.name}"; no server accepts it any more.\n`)
    } else {
      throw new ConfigError(`Unknown tokens command "${action ?? ''}".\n${USAGE}`)
    }
  } finally {
    await store.close()
  }
}

async function main (argv: string[]): Promise<void> {
  const [command, ...rest] = argv
  if (command === 'serve' || command === undefined) return await serve(configFrom(rest))
  if (command === 'migrate') return await openStore(loadConfig().databaseUrl).close()
  if (command === 'tokens') return await tokens(rest)
  if (command === '--help' || command === 'help') {
    process.stdout.write(USAGE + '\n')
    return
  }
  throw new ConfigError(`Unknown command "${command}".\n${USAGE}`)
}

main(process.argv.slice(2)).catch((error: unknown) => {
  const known = error instanceof ConfigError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')
  process.stderr.write(`plantstore: ${known ? (error as Error).message : String((error as Error).stack ?? error)}\n`)
  process.exit(1)
})
