// The judge of "requests come first" (src/webhooks/load.ts), with the event loop's time injected.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { requestsHaveProcess } from '../../src/webhooks/load.js'

function judge (): { loop: { idle: number, active: number }, waiting: { now: number }, busy: () => boolean } {
  const loop = { idle: 0, active: 0 }
  const waiting = { now: 0 }
  return { loop, waiting, busy: requestsHaveProcess(() => waiting.now, () => ({ ...loop })) }
}

test('a loop busy for more than 90% of a window of 100 ms or more: requests have the process', () => {
  const { loop, busy } = judge()
  loop.active += 91; loop.idle += 9
  assert.equal(busy(), true)
  loop.active += 90; loop.idle += 10
  assert.equal(busy(), false, '90% is not more than 90%')
})

test('a window shorter than 100 ms keeps the last verdict, and adds up until it is long enough', () => {
  const { loop, busy } = judge()
  loop.active += 95; loop.idle += 5
  assert.equal(busy(), true)
  loop.active += 5; loop.idle += 15 // 20 ms, mostly idle: too short to judge
  assert.equal(busy(), true)
  loop.active += 40; loop.idle += 40 // with the 20 before, 100 ms at 45%
  assert.equal(busy(), false)
})

test('8 or more requests waiting: requests have the process, whatever the loop', () => {
  const { loop, waiting, busy } = judge()
  loop.idle += 500
  waiting.now = 7
  assert.equal(busy(), false)
  waiting.now = 8
  assert.equal(busy(), true)
})
