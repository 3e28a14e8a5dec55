// When a failed delivery is tried again: the Standard Webhooks schedule, with jitter, and the
// receiver's Retry-After when it asks for longer (SPEC section 5).

/** The waits after each failed attempt: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h, 24 h. After the tenth attempt, the delivery has failed. */
export const RETRY_SCHEDULE_MS = [5, 300, 1800, 7200, 18_000, 36_000, 50_400, 72_000, 86_400].map(seconds => seconds * 1000)

/** Each wait is moved by up to this share either way, so that deliveries failed together do not all return together. */
export const JITTER = 0.1

/** The longest Retry-After honoured: the schedule's own longest wait. */
const MAX_RETRY_AFTER_MS = 86_400_000

/**
 * When the attempt after `made` failed attempts is due, or undefined when there is none left.
 * `retryAfterMs` (the receiver's Retry-After) lengthens the wait, never shortens it.
 */
export function nextAttemptAt (made: number, now: Date, retryAfterMs?: number, random: () => number = Math.random): Date | undefined {
  const wait = RETRY_SCHEDULE_MS[made - 1]
  if (wait === undefined) return undefined
  const jittered = Math.round(wait * (1 - JITTER + 2 * JITTER * random()))
  return new Date(now.getTime() + Math.max(jittered, Math.min(retryAfterMs ?? 0, MAX_RETRY_AFTER_MS)))
}

/** A Retry-After header's wait in ms (delta-seconds or an HTTP date), or undefined when it has none that makes sense. */
export function retryAfterMs (header: string | undefined, now: Date): number | undefined {
  if (header === undefined) return undefined
  const text = header.trim()
  // Any number of digits: a wait too long to count is the longest (capped by the caller).
  if (/^\d+$/.test(text)) return Number(text) * 1000
  // An HTTP date ends in GMT (RFC 9110); Date.parse alone would take "-5" for a year.
  const date = /GMT$/.test(text) ? Date.parse(text) : Number.NaN
  return Number.isNaN(date) ? undefined : Math.max(0, date - now.getTime())
}
