import type { ValidateFunction } from 'ajv'
import { isUtf8 } from 'node:buffer'
import { ConfigError } from '../config.js'
import { validatorCompiler } from '../compilers.js'
import { BODY_LIMIT, route } from '../contract.js'
import { fieldOf, rule, shortField, type ValidationIssue } from '../errors.js'
import { JsonError, parseJson } from '../json.js'
import type { PlantRecord } from '../store/store.js'

// The export format, NDJSON: one plant a line, as `{"id":…,"name":…,"tag":…}` (NewPlant's shape,
// no tag key when there is none), ids as exact JSON integers, in id order; nothing else.

/**
 * The last line of an export that failed part way. It is not JSON, so an import of that output
 * stops there rather than store part of the plants; import names it.
 */
export const EXPORT_FAILED = 'plantstore export failed here; the lines above are not all the plants.'

/** One plant as a line of an export. */
export function lineOf ({ id, name, tag }: PlantRecord): string {
  return `{"id":${id},"name":${JSON.stringify(name)}${tag === undefined ? '' : `,"tag":${JSON.stringify(tag)}`}}\n`
}

/** "1 plant", "2 plants". */
export const countOf = (plants: number): string => `${plants} plant${plants === 1 ? '' : 's'}`

/** Plants a batch holds: what the store inserts between two reads of the input. */
const IMPORT_BATCH = 1000

let newPlant: { validate: ValidateFunction, fields: string[] } | undefined

/**
 * POST /plants's own validator (the document's NewPlant, int64 exact, no coercion) and the
 * fields it names. Compiled on first use: every other command would pay tens of ms for it.
 */
function newPlantChecks (): { validate: ValidateFunction, fields: string[] } {
  if (newPlant === undefined) {
    const schema = route('addPlant').schema.body as Record<string, unknown>
    newPlant = { validate: validatorCompiler({ schema, httpPart: 'body' }), fields: Object.keys(schema.properties as object) }
  }
  return newPlant
}

/** The import stops: `problem` names the line, and the sentence says what that means. */
export function stop (problem: string): ConfigError {
  return new ConfigError(`${problem} Nothing was imported.`)
}

/**
 * The lines of `input` and their numbers (from 1), as text. A line ends at "\n" (a "\r" before
 * it is JSON whitespace); the last one may lack it. A line must be valid UTF-8 and at most
 * 64 KiB, as a request body, so that a file without line breaks cannot fill the memory.
 */
export async function * linesOf (input: AsyncIterable<Buffer>): AsyncGenerator<{ text: string, number: number }> {
  let pending: Buffer[] = []
  let pendingBytes = 0
  let number = 0
  const line = (bytes: Buffer): { text: string, number: number } => {
    number++
    if (bytes.length > BODY_LIMIT) throw stop(`Line ${number} is longer than 64 KiB.`)
    if (!isUtf8(bytes)) throw stop(`Line ${number} is not valid UTF-8 text.`)
    return { text: bytes.toString('utf8'), number }
  }
  for await (const chunk of input) {
    let start = 0
    for (let end = chunk.indexOf(10); end !== -1; end = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, end)
      yield line(pending.length === 0 ? piece : Buffer.concat([...pending, piece]))
      pending = []
      pendingBytes = 0
      start = end + 1
    }
    if (start < chunk.length) {
      pending.push(chunk.subarray(start))
      pendingBytes += chunk.length - start
      if (pendingBytes > BODY_LIMIT) throw stop(`Line ${number + 1} is longer than 64 KiB.`)
    }
  }
  if (pendingBytes > 0) yield line(Buffer.concat(pending))
}

/**
 * The plant on line `number`, checked as POST /plants checks a body, or undefined for a blank
 * line. Stricter in one way: a field other than id, name and tag stops the import, where a
 * request's is ignored, since an import that dropped data silently would not be exact.
 */
function plantOf (text: string, number: number): PlantRecord | undefined {
  if (/^[ \t\r]*$/.test(text)) return undefined
  if (text === EXPORT_FAILED) throw stop(`Line ${number} says that the export which wrote it failed there, so the plants after it are missing.`)
  let value
  try {
    value = parseJson(text, undefined, `Line ${number}`)
  } catch (error) {
    if (error instanceof JsonError) throw stop(error.message)
    throw error
  }
  const { validate, fields } = newPlantChecks()
  if (value !== null && typeof value === 'object' && !Array.isArray(value)) {
    const extra = Object.keys(value).find(key => !fields.includes(key))
    if (extra !== undefined) throw stop(`Line ${number}: \`${JSON.stringify(shortField(extra)).slice(1, -1)}\` is not a field of a plant (${fields.join(', ')}).`)
  }
  if (!validate(value)) {
    const issue = validate.errors![0] as ValidationIssue
    const field = fieldOf(issue)
    throw stop(field === '' ? `Line ${number} ${rule(issue)}.` : `Line ${number}: \`${field}\` ${rule(issue)}.`)
  }
  const { id, name, tag } = value as PlantRecord
  return tag === undefined ? { id, name } : { id, name, tag }
}

/**
 * The plants of an NDJSON input in batches of `size`, for Store.importPlants; the first bad line
 * throws a ConfigError naming it. `lineAt` turns a position the store reports (0-based, across
 * batches) into the line it came from, for the batch being stored.
 */
export class PlantBatches implements AsyncIterable<PlantRecord[]> {
  /** The position of the current batch's first plant, and the line of each of its plants. */
  private first = 0
  private lines: number[] = []

  constructor (private readonly input: AsyncIterable<Buffer>) {}

  lineAt (position: number): number {
    return this.lines[position - this.first]
  }

  async * [Symbol.asyncIterator] (): AsyncGenerator<PlantRecord[]> {
    let plants: PlantRecord[] = []
    let lines: number[] = []
    const hand = (): PlantRecord[] => {
      this.first += this.lines.length
      this.lines = lines
      const batch = plants
      plants = []
      lines = []
      return batch
    }
    for await (const { text, number } of linesOf(this.input)) {
      const plant = plantOf(text, number)
      if (plant === undefined) continue
      plants.push(plant)
      lines.push(number)
      if (plants.length === IMPORT_BATCH) yield hand()
    }
    if (plants.length > 0) yield hand()
  }
}
