import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Slots } from '../../src/store/slots.js'

/** Work that runs until its `end` is called, and says when it began. */
function held (log: string[], name: string): { work: () => Promise<string>, end: () => void } {
  let end = (): void => {}
  const ended = new Promise<void>(resolve => { end = resolve })
  return { work: async () => { log.push(name); await ended; return name }, end }
}

const refused = (): Error => new Error('no slot')
const turn = async (): Promise<void> => await new Promise(resolve => setImmediate(resolve))

test('work past the slots waits, and runs in order of arrival as slots free', async () => {
  const slots = new Slots(2, 10_000, refused)
  const log: string[] = []
  const [a, b, c, d] = ['a', 'b', 'c', 'd'].map(name => held(log, name))
  const running = [a, b, c, d].map(w => slots.hold(w.work))
  await turn()
  assert.deepEqual(log, ['a', 'b'], 'two at once')
  b.end()
  assert.equal(await running[1], 'b')
  await turn()
  assert.deepEqual(log, ['a', 'b', 'c'], 'the first in line takes the slot freed')
  a.end(); c.end(); d.end()
  assert.deepEqual(await Promise.all(running), ['a', 'b', 'c', 'd'])
})

test('a failure frees its slot; work that waits past its time is refused without running, and leaves the line', async () => {
  const slots = new Slots(1, 50, refused)
  const log: string[] = []
  await assert.rejects(slots.hold(async () => { throw new Error('broken') }), /broken/)
  const first = held(log, 'first')
  const running = slots.hold(first.work)
  const late = slots.hold(async () => { log.push('late'); return 'late' })
  await assert.rejects(late, /no slot/)
  first.end()
  assert.equal(await running, 'first')
  assert.equal(await slots.hold(async () => 'next'), 'next', 'the slot is free again, not given to the refused')
  assert.deepEqual(log, ['first'])
})
