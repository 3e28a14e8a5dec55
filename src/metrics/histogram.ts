import type { Metric, Registry } from 'prom-client'

/** One labelled series of a HotHistogram: its counts, kept with plain arithmetic. */
export class Series<T extends string> {
  count = 0
  sum = 0
  /** Observations per bucket, not cumulative; the last is above every bound (+Inf). */
  readonly counts: Float64Array

  constructor (readonly labels: Record<T, string>, private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length + 1)
  }

  observe (value: number): void {
    const bounds = this.bounds
    let i = 0
    while (i < bounds.length && value > bounds[i]) i++
    this.counts[i]++
    this.sum += value
    this.count++
  }
}

interface Sample { labels: Record<string, string | number>, value: number, metricName: string }

/**
 * A histogram for the hot path. prom-client's own `observe` validates and hashes the labels on
 * every call, a child from `labels()` too: about a microsecond, several on a busy machine
 * (docs/performance.md). Here a caller keeps the Series of its labels and observes into it with
 * a few additions; the registry reads the series only when scraped, through `get()`, the one
 * method it asks of a metric (prom-client's own metrics answer it in this same shape).
 */
export class HotHistogram<T extends string> {
  private readonly all = new Map<string, Series<T>>()
  readonly name: string
  readonly help: string
  private readonly bounds: readonly number[]

  constructor ({ name, help, buckets, registers }: { name: string, help: string, labelNames?: readonly T[], buckets: readonly number[], registers: Registry[] }) {
    this.name = name
    this.help = help
    this.bounds = [...buckets].sort((a, b) => a - b)
    for (const registry of registers) registry.registerMetric(this as unknown as Metric)
  }

  /** The series for these label values, created on first use; callers keep it rather than ask again. */
  series (labels: Record<T, string>): Series<T> {
    const key = JSON.stringify(labels)
    let found = this.all.get(key)
    if (found === undefined) {
      found = new Series(labels, this.bounds)
      this.all.set(key, found)
    }
    return found
  }

  /** Every series created so far. */
  each (): Iterable<Series<T>> {
    return this.all.values()
  }

  /** Zeroes every series (the registry's resetMetrics). */
  reset (): void {
    for (const series of this.all.values()) {
      series.counts.fill(0)
      series.sum = 0
      series.count = 0
    }
  }

  async get (): Promise<{ name: string, help: string, type: 'histogram', aggregator: 'sum', values: Sample[] }> {
    const values: Sample[] = []
    const bucket = `${this.name}_bucket`
    for (const series of this.all.values()) {
      let cumulative = 0
      this.bounds.forEach((bound, i) => {
        cumulative += series.counts[i]
        values.push({ labels: { ...series.labels, le: bound }, value: cumulative, metricName: bucket })
      })
      values.push({ labels: { ...series.labels, le: '+Inf' }, value: series.count, metricName: bucket })
      values.push({ labels: series.labels, value: series.sum, metricName: `${this.name}_sum` })
      values.push({ labels: series.labels, value: series.count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: 'histogram', aggregator: 'sum', values }
  }
}
