import assert from 'node:assert/strict'
import { PlantstoreError } from '../../src/client/index.js'

/** The PlantstoreError that `promise` rejects with. */
export async function refusal (promise: Promise<unknown>): Promise<PlantstoreError> {
  const error = await promise.then(() => undefined, (error: unknown) => error)
  assert.ok(error instanceof PlantstoreError, `expected a PlantstoreError, got ${String(error)}`)
  return error
}
