import { parseArgs, type ParseArgsConfig } from 'node:util'
import { ConfigError, quoted } from '../config.js'

type Options = NonNullable<ParseArgsConfig['options']>

/** A command's flags by name (a string, a list of strings for repeatable flags) and its positional arguments. */
export interface Parsed { values: Record<string, string | string[] | boolean | undefined>, positionals: string[] }

/** What parseArgs says, as one line that names the command and points to its help. */
function usageError (command: string, error: Error & { code?: string }): ConfigError {
  const option = /'(-[^' ]*)/.exec(error.message)?.[1]
  const problem = error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined
    ? `unknown option ${quoted(option)}`
    : error.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL'
      ? `unexpected argument ${quoted(/'([^']*)'/.exec(error.message)?.[1] ?? '')}`
      // Missing, or followed by what reads as a flag (`--expires-in -1d`): parseArgs calls that ambiguous.
      : error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && option !== undefined && /argument (missing|is ambiguous)/.test(error.message)
        ? `option ${quoted(option)} needs a value (one that starts with a dash is written ${option}=-…)`
        : error.message.split('\n')[0].replace(/\.$/, '').replace(/^Option/, 'option')
  return new ConfigError(`${command}: ${problem}; see plantstore ${command} --help.`)
}

/**
 * Parses the arguments of `command` (such as `tokens create`) strictly: every command knows
 * `--help` (or `-h`); anything unknown, or a flag given twice that takes one value, is a
 * ConfigError of one line. Returns undefined when help
 * was asked for.
 */
export function parseCommand (command: string, args: string[], options: Options, positionals = 0): Parsed | undefined {
  let parsed
  try {
    parsed = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, allowPositionals: positionals > 0, strict: true, tokens: true })
  } catch (error) {
    if ((error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS') === true) throw usageError(command, error as Error)
    throw error
  }
  if (parsed.values.help === true) return undefined
  // parseArgs keeps the last of a flag given twice: `--name a --name b` would quietly be b.
  const seen = new Set<string>()
  for (const token of parsed.tokens) {
    if (token.kind !== 'option' || options[token.name]?.multiple === true) continue
    if (seen.has(token.name)) throw new ConfigError(`${command}: option ${quoted(token.rawName)} given twice; see plantstore ${command} --help.`)
    seen.add(token.name)
  }
  if (parsed.positionals.length > positionals) throw new ConfigError(`${command}: unexpected argument ${quoted(parsed.positionals[positionals])}; see plantstore ${command} --help.`)
  return { values: parsed.values as Parsed['values'], positionals: parsed.positionals }
}
