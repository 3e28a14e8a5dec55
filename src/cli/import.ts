import { fstatSync } from 'node:fs'
import { ConfigError } from '../config.js'
import type { Store } from '../store/store.js'
import { parseCommand } from './args.js'
import { databaseUrlOf, openForCommand } from './database.js'
import { countOf, PlantBatches, stop } from './plant-lines.js'
import { USAGE } from './usage.js'

/**
 * Stores the plants of the NDJSON `input` in `store`, all or none, and returns how many it
 * stored; anything that stops it is a ConfigError of one line, naming the line at fault.
 */
export async function importFrom (store: Store, input: AsyncIterable<Buffer>, { replace }: { replace: boolean }): Promise<number> {
  const batches = new PlantBatches(input)
  const { empty, all } = await peek(batches)
  // An input without a single plant replaces none: `--replace` would empty the store, and an
  // export stopped before its first line (killed outright, it cannot say so) writes nothing.
  if (empty && replace && (await store.list({ limit: 1 })).plants.length > 0) {
    throw stop('The input holds no plants, so --replace would delete every plant in the store and store none (an export stopped before its first line writes nothing); check the input.')
  }
  const result = await store.importPlants(all, { replace: replace && !empty })
  switch (result.outcome) {
    case 'imported':
      return result.plants
    case 'not-empty':
      throw stop('The store already holds plants, and import fills an empty store only; give --replace to delete its plants first (tokens stay), in the same transaction.')
    case 'conflict':
      throw stop(`Line ${batches.lineAt(result.at)} gives the id of an earlier line with another name or tag.`)
    case 'unstorable':
      throw stop(`Line ${batches.lineAt(result.at)}: ${result.reason}`)
  }
}

/** Whether `items` has none, found by reading its first; `all` yields every item, that first one included. */
async function peek<T> (items: AsyncIterable<T>): Promise<{ empty: boolean, all: AsyncIterable<T> }> {
  const iterator = items[Symbol.asyncIterator]()
  const first = await iterator.next()
  const all = async function * (): AsyncGenerator<T> {
    if (first.done === true) return
    try {
      yield first.value
      for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) yield next.value
    } finally {
      await iterator.return?.() // a reader that stops early closes the source, as for await does
    }
  }
  return { empty: first.done === true, all: all() }
}

/** `plantstore import [--replace]`: the NDJSON of an export, from stdin, into the store. */
export async function importPlants (args: string[]): Promise<void> {
  const parsed = parseCommand('import', args, { 'database-url': { type: 'string' }, replace: { type: 'boolean' } })
  if (parsed === undefined) {
    process.stdout.write(USAGE.import + '\n')
    return
  }
  if (process.stdin.isTTY) throw new ConfigError('import reads plants from stdin, such as plantstore import < plants.ndjson; see plantstore import --help.')
  if (fstatSync(0).isDirectory()) throw new ConfigError('stdin is a directory; import reads plants from a file or a pipe, such as plantstore import < plants.ndjson.')
  const store = await openForCommand(databaseUrlOf(parsed.values['database-url'] as string | undefined))
  try {
    const plants = await importFrom(store, process.stdin, { replace: parsed.values.replace === true })
    process.stderr.write(`Imported ${countOf(plants)}.\n`)
  } finally {
    await store.close()
  }
}
