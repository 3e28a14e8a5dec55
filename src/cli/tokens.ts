import { writeSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { ConfigError, quoted } from '../config.js'
import { StoreUnavailableError } from '../errors.js'
import { DEFAULT_SCOPES, type NewToken, type Scope, type Store, type TokenRecord } from '../store/store.js'
import { digestOf, discards, generateToken, isScope, isTokenName, parseDuration, TEN_YEARS_MS, TOKEN_CACHE_MS } from '../tokens.js'
import { parseCommand, type Parsed } from './args.js'
import { databaseUrlOf, openForCommand } from './database.js'
import { USAGE } from './usage.js'

const DATABASE_URL = { 'database-url': { type: 'string' } } as const

/** A name as `tokens list` prints it: escaped, so that a name stored before names were checked cannot break the line. */
const printable = (name: string): string => JSON.stringify(name).slice(1, -1)

/** Whichever ended the token first, and when: its expiry or its revocation; undefined while it is active. */
function endOf (token: TokenRecord): { state: 'expired' | 'revoked', at: Date } | undefined {
  const expired = token.expiresAt !== undefined && token.expiresAt.getTime() <= Date.now()
  if (token.revokedAt !== undefined && !(expired && token.expiresAt!.getTime() <= token.revokedAt.getTime())) return { state: 'revoked', at: token.revokedAt }
  return expired ? { state: 'expired', at: token.expiresAt! } : undefined
}

/** One line of `tokens list`, tab-separated; the state is whichever ended the token first. */
function describeToken (token: TokenRecord): string {
  const end = endOf(token)
  const state = end === undefined ? 'active' : `${end.state} ${end.at.toISOString()}`
  const expires = token.expiresAt === undefined ? 'never expires' : `expires ${token.expiresAt.toISOString()}`
  return `${token.id}\t${printable(token.name)}\t${token.scopes.join(',')}\t${state}\tcreated ${token.createdAt.toISOString()}\t${expires}`
}

/** The moment a token made now with `--expires-in text` stops working; a ConfigError if the lifetime is malformed or too long. */
function expiryOf (text: string): Date {
  const lifetime = parseDuration(text)
  if (lifetime === undefined) throw new ConfigError(`--expires-in takes a whole number above 0 and a unit (s, m, h, d, w), such as 30d, not ${quoted(text)}.`)
  if (lifetime > TEN_YEARS_MS) throw new ConfigError(`--expires-in is at most 10 years (3653d or 521w), not ${quoted(text)}.`)
  return new Date(Date.now() + lifetime)
}

/** The token `tokens create` was asked for, checked before any store is opened or created. */
function newTokenOf (values: Parsed['values']): Omit<NewToken, 'digest'> {
  const name = values.name as string | undefined
  if (name === undefined) throw new ConfigError('tokens create needs --name NAME; see plantstore tokens create --help.')
  if (!isTokenName(name)) throw new ConfigError(`A token name is 1 to 64 letters, digits, dots, hyphens or underscores, not all digits; ${quoted(name)} is not.`)
  const scopes = (values.scope as string[] | undefined) ?? DEFAULT_SCOPES
  const unknown = scopes.find(scope => !isScope(scope))
  if (unknown !== undefined) throw new ConfigError(`Unknown scope ${quoted(unknown)}; use plants:read, plants:write or admin.`)
  const expiresIn = values['expires-in'] as string | undefined
  return { name, scopes: [...new Set(scopes)] as Scope[], expiresAt: expiresIn === undefined ? undefined : expiryOf(expiresIn) }
}

/** Writes all of `text` to `fd`, waiting while a non-blocking pipe is full (EAGAIN); any other error is thrown. */
function writeAll (fd: number, text: string): void {
  const bytes = Buffer.from(text)
  const pause = new Int32Array(new SharedArrayBuffer(4))
  for (let written = 0; written < bytes.length;) {
    try {
      written += writeSync(fd, bytes, written)
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') throw error
      Atomics.wait(pause, 0, 0, 10) // the reader is there, and slow: wait for it, as a blocking write would
    }
  }
}

async function create (store: Store, wanted: Omit<NewToken, 'digest'>): Promise<void> {
  if (discards(1)) throw new ConfigError('stdout goes to /dev/null (or was closed), where no one would see the token, which is shown only once; no token was created. Send stdout to a file or a variable.')
  const token = generateToken()
  const digest = digestOf(token)
  const created = await store.createToken({ ...wanted, digest }).catch(async (error: unknown) => {
    if (!(error instanceof StoreUnavailableError && error.outcomeUnknown)) throw error
    throw new ConfigError(await unconfirmed(store, digest, wanted.name, error))
  })
  if (created === 'name-taken') throw new ConfigError(`An active token is already named ${quoted(wanted.name)}; revoke it or choose another name.`)
  try {
    // Alone on stdout, so that TOKEN=$(plantstore tokens create …) works; written here, so that a
    // token that could not be shown (a full disk, a reader gone) is known here.
    writeAll(1, token + '\n')
  } catch (error) {
    // No one has seen it, and no one can: it must not stay active, holding its name (which is
    // this token's alone while it is active).
    const why = (error as Error).message
    try {
      await store.revokeToken(created.name)
    } catch (revokeError) {
      throw new ConfigError(`Could not write the token to stdout (${why}), nor revoke it (${(revokeError as Error).message}): revoke token ${created.id}.`)
    }
    throw new ConfigError(`Could not write the token to stdout (${why}); token ${created.id} was revoked, unseen.`)
  }
  process.stderr.write(`Created token ${created.id} "${created.name}" (${created.scopes.join(', ')}). It is shown only this once.\n`)
}

/**
 * What to say of a create the store did not confirm (its deadline passed, its COMMIT's outcome
 * unknown): the token may have been made, and no one has seen it, so it must not stay active.
 */
async function unconfirmed (store: Store, digest: Buffer, name: string, error: StoreUnavailableError): Promise<string> {
  const why = `The store did not confirm the token in time (${error.message})`
  try {
    const found = await store.findToken(digest)
    if (found !== undefined) {
      await store.revokeToken(String(found.record.id))
      return `${why}; it was made, and token ${found.record.id} is now revoked, unseen. Create it again.`
    }
  } catch {}
  return `${why}: it may have been made, unseen. If \`plantstore tokens list\` shows ${quoted(name)} active, revoke it.`
}

/** One line a token on stdout; none at all says so on stderr, so that the stdout of a script stays empty. */
async function list (store: Store): Promise<void> {
  const tokens = await store.listTokens()
  for (const token of tokens) process.stdout.write(describeToken(token) + '\n')
  if (tokens.length === 0) process.stderr.write('No tokens in this store; plantstore tokens create --name NAME makes one.\n')
}

async function revoke (store: Store, nameOrId: string): Promise<void> {
  const asked = Date.now()
  const revoked = await store.revokeToken(nameOrId).catch((error: unknown) => {
    if (!(error instanceof StoreUnavailableError && error.outcomeUnknown)) throw error
    throw new ConfigError(`The store did not confirm the revocation in time (${error.message}): it may have been made; \`plantstore tokens list\` shows whether ${quoted(nameOrId)} is revoked.`)
  })
  if (revoked === undefined) throw new ConfigError(`No active token is named ${quoted(nameOrId)} and none has that id.`)
  // By id, a revoked token is found as it is: its revocation kept, from before this command.
  const earlier = revoked.revokedAt !== undefined && revoked.revokedAt.getTime() < asked ? revoked.revokedAt : undefined
  // Running servers may answer from a lookup made just before the revocation; once this returns, none does.
  await sleep(Math.max(0, (earlier?.getTime() ?? Date.now()) + TOKEN_CACHE_MS + 100 - Date.now()))
  const end = earlier === undefined ? undefined : endOf(revoked)
  process.stderr.write(end === undefined
    ? `Revoked token ${revoked.id} "${printable(revoked.name)}"; no server accepts it any more.\n`
    : `Token ${revoked.id} "${printable(revoked.name)}" ${end.state === 'expired' ? 'expired' : 'was revoked already'}, at ${end.at.toISOString()}; nothing changed.\n`)
}

const SUBCOMMANDS = {
  create: { options: { ...DATABASE_URL, name: { type: 'string' }, scope: { type: 'string', multiple: true }, 'expires-in': { type: 'string' } }, positionals: 0 },
  list: { options: DATABASE_URL, positionals: 0 },
  revoke: { options: DATABASE_URL, positionals: 1 }
} as const

/** `plantstore tokens create|list|revoke …`: the subcommand comes first, then its flags. */
export async function tokens (args: string[]): Promise<void> {
  const [action, ...rest] = args
  if (action === undefined) throw new ConfigError('tokens needs a command: create, list or revoke; see plantstore tokens --help.')
  if (action === '--help' || action === '-h') {
    process.stdout.write(USAGE.tokens + '\n')
    return
  }
  if (!Object.hasOwn(SUBCOMMANDS, action)) throw new ConfigError(`Unknown tokens command ${quoted(action)}; use create, list or revoke (see plantstore tokens --help).`)
  const subcommand = action as keyof typeof SUBCOMMANDS
  const parsed = parseCommand(`tokens ${subcommand}`, rest, SUBCOMMANDS[subcommand].options, SUBCOMMANDS[subcommand].positionals)
  if (parsed === undefined) {
    process.stdout.write(USAGE[`tokens ${subcommand}`] + '\n')
    return
  }
  const wanted = subcommand === 'create' ? newTokenOf(parsed.values) : undefined
  const [nameOrId] = parsed.positionals
  if (subcommand === 'revoke' && nameOrId === undefined) throw new ConfigError('tokens revoke takes one NAME_OR_ID; see plantstore tokens revoke --help.')
  const store = await openForCommand(databaseUrlOf(parsed.values['database-url'] as string | undefined))
  try {
    if (wanted !== undefined) await create(store, wanted)
    else if (subcommand === 'list') await list(store)
    else await revoke(store, nameOrId)
  } finally {
    await store.close()
  }
}
