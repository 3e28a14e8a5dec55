/**
 * A bounded map whose entries are good for `maxAgeMs`: for answers that cost a store read and
 * may be a little old, but never older than that. When full, the oldest entry makes room.
 * Callers take `at` before the read they cache, so an entry never outlives a change it missed.
 */
export class TimedCache<K, V> {
  private readonly entries = new Map<K, { value: V, at: number }>()

  constructor (private readonly maxAgeMs: number, private readonly capacity: number) {}

  get (key: K, now = performance.now()): V | undefined {
    const entry = this.entries.get(key)
    if (entry === undefined) return undefined
    if (now - entry.at < this.maxAgeMs) return entry.value
    this.entries.delete(key)
    return undefined
  }

  set (key: K, value: V, at: number): void {
    this.entries.delete(key) // re-inserted last, so it is evicted last
    if (this.entries.size >= this.capacity) this.entries.delete(this.entries.keys().next().value as K)
    this.entries.set(key, { value, at })
  }

  get size (): number {
    return this.entries.size
  }
}
