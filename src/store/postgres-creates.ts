// Creates in batches on PostgreSQL. Every plant write takes the change log's head, whose row lock
// is held to COMMIT (src/store/postgres-changes.ts), so plant writes commit one at a time: alone,
// a create would wait for every other's WAL flush. The creates that arrive together share one
// transaction instead, which takes the head once for all of them: one flush for the batch.
import { isUniqueViolation } from './postgres-errors.js'
import type { CreatedOrAgain } from './postgres-changes.js'
import type { Created, PlantRecord } from './store.js'

/** Transactions of creates under way at once: one holding the head while the next inserts its plants. */
const IN_FLIGHT = 2
/** Creates in one transaction at most. */
const BATCH = 256
/** A create found taken and then gone (deleted meanwhile) this many times answers conflict. */
const ATTEMPTS = 3

interface Waiting {
  plant: PlantRecord
  resolve: (created: Created) => void
  reject: (error: unknown) => void
  attempts: number
  /** Run in a transaction of its own: its batch was refused by a unique index other than the id's. */
  alone: boolean
}

/** A plant's create, run by `runBatch` (createMany on a connection) with the others that wait. */
export function batchedCreates (runBatch: (plants: readonly PlantRecord[]) => Promise<CreatedOrAgain[]>): (plant: PlantRecord) => Promise<Created> {
  const waiting: Waiting[] = []
  let running = 0
  let scheduled = false

  /** Starts batches at the end of this turn of the event loop, so that the creates of the turn join. */
  function schedule (): void {
    if (scheduled || running >= IN_FLIGHT || waiting.length === 0) return
    scheduled = true
    setImmediate(() => {
      scheduled = false
      while (running < IN_FLIGHT && waiting.length > 0) run(take()).catch(() => {}) // run settles every waiting create itself
    })
  }

  /** The next batch: the first waiting create alone if it must be, else up to BATCH with distinct ids (a repeated id waits for the next), ascending. */
  function take (): Waiting[] {
    if (waiting[0].alone) return waiting.splice(0, 1)
    const batch = new Map<bigint, Waiting>()
    for (let i = 0; i < waiting.length && batch.size < BATCH;) {
      const next = waiting[i]
      if (next.alone || batch.has(next.plant.id)) { i++; continue }
      batch.set(next.plant.id, next)
      waiting.splice(i, 1)
    }
    return [...batch.values()].sort((a, b) => (a.plant.id < b.plant.id ? -1 : a.plant.id > b.plant.id ? 1 : 0))
  }

  async function run (batch: Waiting[]): Promise<void> {
    running++
    try {
      const outcomes = await runBatch(batch.map(entry => entry.plant))
      outcomes.forEach((outcome, i) => {
        const entry = batch[i]
        if (outcome !== 'again') entry.resolve(outcome)
        else if (++entry.attempts >= ATTEMPTS) entry.resolve({ outcome: 'conflict' })
        else waiting.push(entry)
      })
    } catch (error) {
      if (!isUniqueViolation(error)) for (const entry of batch) entry.reject(error)
      // Refused by an index an operator added, as a conflict: which create it was is found by running each alone.
      else if (batch.length === 1) batch[0].resolve({ outcome: 'conflict' })
      else waiting.unshift(...batch.map(entry => ({ ...entry, alone: true })))
    } finally {
      running--
      schedule()
    }
  }

  return (plant) => new Promise<Created>((resolve, reject) => {
    waiting.push({ plant, resolve, reject, attempts: 0, alone: false })
    schedule()
  })
}
