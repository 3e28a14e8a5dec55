import { StoreUnavailableError, UnstorableTextError } from '../errors.js'
import type { Store } from '../store/store.js'
import { STORE_OPERATIONS, type Metrics, type StoreErrorKind, type StoreOperation } from './metrics.js'

/** The members of Store that are not requests' store calls, passed through untimed; onCommit is the store's hook, set below. */
type PassedThrough = 'close' | 'exportPlants' | 'importPlants' | 'rateWindows' | 'webhooks' | 'onCommit'
type MustBeNever<T extends never> = T
/** Fails to compile when Store gains a member that is neither timed (STORE_OPERATIONS) nor passed through. */
export type EveryStoreMemberPlaced = MustBeNever<Exclude<keyof Store, StoreOperation | PassedThrough>>

function kindOf (error: unknown): StoreErrorKind {
  if (error instanceof StoreUnavailableError) return error.reason
  return error instanceof UnstorableTextError ? 'refused' : 'internal'
}

/**
 * `store`, with every call timed and counted while it runs, and its failures counted by kind;
 * its group commits, if it makes any, observed. A decorator: the stores know nothing of metrics.
 */
export function instrumentStore (store: Store, metrics: Metrics): Store {
  const { state } = metrics
  // Passed through untimed: the bulk transfers, the rate limit's shared counts and the webhooks' work are not requests' store calls.
  const instrumented = {
    close: (withinMs) => store.close(withinMs),
    exportPlants: () => store.exportPlants(),
    importPlants: (source, options) => store.importPlants(source, options),
    rateWindows: store.rateWindows,
    webhooks: store.webhooks
  } as Store
  for (const operation of STORE_OPERATIONS) {
    // Looked up at each call, as the caller would: the wrapper adds no method the store lacks.
    const call = (args: unknown[]): Promise<unknown> => (store[operation] as (...args: unknown[]) => Promise<unknown>).apply(store, args)
    const latency = metrics.storeOperations.series({ operation })
    const settled = (start: number): void => {
      state.storeInFlight[operation]--
      latency.observe((performance.now() - start) / 1000)
    }
    // The caller gets the store's own promise: the metrics watch it beside the caller, not in its way.
    instrumented[operation] = ((...args: unknown[]) => {
      const start = performance.now()
      const answer = call(args)
      state.storeInFlight[operation]++
      answer.then(() => { settled(start) }, (error: unknown) => {
        settled(start)
        metrics.storeErrors.inc({ operation, kind: kindOf(error) })
      })
      return answer
    }) as never
  }
  // The series appears with the first commit: a store that makes none (PostgreSQL) shows none.
  let commits: ReturnType<typeof metrics.groupCommits.series> | undefined
  store.onCommit = writes => {
    commits ??= metrics.groupCommits.series({})
    commits.observe(writes)
  }
  return instrumented
}
