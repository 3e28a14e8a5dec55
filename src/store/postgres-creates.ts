// Creates in batches on PostgreSQL. Every plant write takes the change log's head, whose row lock
// is held to COMMIT (src/store/postgres-changes.ts), so plant writes commit one at a time: alone,
// a create would wait for every other's WAL flush. The creates that arrive together share one
// transaction instead, which takes the head once for all of them: one flush for the batch.
import { StoreUnavailableError } from '../errors.js'
import { isUniqueViolation, sqlstateOf } from './postgres-errors.js'
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
  /** True once the caller was answered (503, at the deadline): the create is dropped if it has not begun. */
  answered: () => boolean
  resolve: (created: Created) => void
  reject: (error: unknown) => void
  attempts: number
}

/**
 * A batch that one of its creates spoils for the others: an index an operator added refuses one
 * (a unique violation), or two batches deadlock on such an index's keys, which the order of ids
 * does not order. Its halves are run one after the other, down to the create at fault.
 */
const spoiled = (error: unknown): boolean => isUniqueViolation(error) || sqlstateOf(error) === '40P01'

/** A plant's create, run by `runBatch` (createMany on a connection) with the others that wait. */
export function batchedCreates (runBatch: (plants: readonly PlantRecord[]) => Promise<CreatedOrAgain[]>): (plant: PlantRecord, answered: () => boolean) => Promise<Created> {
  const waiting: Waiting[] = []
  let running = 0
  let scheduled = false

  /** Starts batches at the end of this turn of the event loop, so that the creates of the turn join. */
  function schedule (): void {
    if (scheduled || running >= IN_FLIGHT || waiting.length === 0) return
    scheduled = true
    setImmediate(() => {
      scheduled = false
      while (running < IN_FLIGHT && waiting.length > 0) {
        const batch = take()
        if (batch.length > 0) run(batch).catch(() => {}) // run settles every create of its batch itself
      }
    })
  }

  /**
   * The next batch: up to BATCH waiting creates with distinct ids (a repeated id waits for the
   * next), in ascending order of id, so that batches lock their rows in one order and never
   * deadlock on them. Creates whose caller was answered meanwhile are dropped, not run.
   */
  function take (): Waiting[] {
    const batch = new Map<bigint, Waiting>()
    for (let i = 0; i < waiting.length && batch.size < BATCH;) {
      const next = waiting[i]
      if (batch.has(next.plant.id)) { i++; continue }
      waiting.splice(i, 1)
      if (next.answered()) next.reject(new StoreUnavailableError('The caller was answered before the create began: not run.', 'deadline'))
      else batch.set(next.plant.id, next)
    }
    return [...batch.values()].sort((a, b) => (a.plant.id < b.plant.id ? -1 : a.plant.id > b.plant.id ? 1 : 0))
  }

  /** Runs `batch` as one transaction, or, when it is spoiled, its halves in turn; settles each create or puts it back to wait. */
  async function settle (batch: Waiting[]): Promise<void> {
    try {
      const outcomes = await runBatch(batch.map(entry => entry.plant))
      outcomes.forEach((outcome, i) => {
        const entry = batch[i]
        if (outcome !== 'again') entry.resolve(outcome)
        else if (++entry.attempts >= ATTEMPTS) entry.resolve({ outcome: 'conflict' })
        else waiting.push(entry)
      })
    } catch (error) {
      if (spoiled(error) && batch.length > 1) {
        const half = Math.ceil(batch.length / 2)
        await settle(batch.slice(0, half))
        await settle(batch.slice(half))
      } else if (isUniqueViolation(error)) {
        batch[0].resolve({ outcome: 'conflict' }) // the one create an operator's index refuses
      } else {
        for (const entry of batch) entry.reject(error)
      }
    }
  }

  async function run (batch: Waiting[]): Promise<void> {
    running++
    try {
      await settle(batch)
    } finally {
      running--
      schedule()
    }
  }

  return (plant, answered) => new Promise<Created>((resolve, reject) => {
    waiting.push({ plant, answered, resolve, reject, attempts: 0 })
    schedule()
  })
}
