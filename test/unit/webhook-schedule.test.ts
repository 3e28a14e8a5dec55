import assert from 'node:assert/strict'
import { test } from 'node:test'
import { JITTER, nextAttemptAt, RETRY_SCHEDULE_MS, retryAfterMs } from '../../src/webhooks/schedule.js'

const NOW = new Date('2026-11-25T00:00:00.000Z')
const after = (made: number, random: number, retryAfter?: number): number | undefined => nextAttemptAt(made, NOW, retryAfter, () => random)?.getTime()

test('the Standard Webhooks schedule: nine waits after ten attempts at most, each within its jitter', () => {
  assert.deepEqual(RETRY_SCHEDULE_MS.map(ms => ms / 1000), [5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400])
  for (const [i, wait] of RETRY_SCHEDULE_MS.entries()) {
    assert.equal(after(i + 1, 0.5)! - NOW.getTime(), wait, `after attempt ${i + 1}`)
    assert.equal(after(i + 1, 0)! - NOW.getTime(), Math.round(wait * (1 - JITTER)), 'the earliest')
    assert.equal(after(i + 1, 1)! - NOW.getTime(), Math.round(wait * (1 + JITTER)), 'the latest')
  }
  assert.equal(after(10, 0.5), undefined, 'after the tenth attempt, none')
  const spread = new Set(Array.from({ length: 50 }, () => nextAttemptAt(1, NOW)!.getTime()))
  assert.ok(spread.size > 10, 'with the real random, deliveries failed together come back apart')
})

test('Retry-After lengthens a wait, never shortens it, and is bounded by a day', () => {
  assert.equal(after(1, 0.5, 3_600_000)! - NOW.getTime(), 3_600_000)
  assert.equal(after(2, 0.5, 1000)! - NOW.getTime(), 300_000, 'shorter than the schedule: the schedule')
  assert.equal(after(1, 0.5, 30 * 86_400_000)! - NOW.getTime(), 86_400_000)
  assert.equal(retryAfterMs('120', NOW), 120_000)
  assert.equal(retryAfterMs(' 7 ', NOW), 7000)
  assert.equal(retryAfterMs('Wed, 25 Nov 2026 00:10:00 GMT', NOW), 600_000)
  assert.equal(retryAfterMs('Tue, 24 Nov 2026 00:10:00 GMT', NOW), 0, 'a date past: no wait beyond the schedule')
  for (const header of [undefined, '', 'soon', '-5', '1.5']) assert.equal(retryAfterMs(header, NOW), undefined, String(header))
  for (const digits of ['99999999999', '9'.repeat(20), '9'.repeat(400)]) {
    assert.equal(after(1, 0.5, retryAfterMs(digits, NOW))! - NOW.getTime(), 86_400_000, `${digits.length} digits: the longest wait, not none`)
  }
})
