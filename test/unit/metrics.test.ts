import assert from 'node:assert/strict'
import { test } from 'node:test'
import { Counter, Registry } from 'prom-client'
import { StoreUnavailableError, UnstorableTextError } from '../../src/errors.js'
import { summedInOrder } from '../../src/metrics/cluster.js'
import { HotHistogram } from '../../src/metrics/histogram.js'
import { createMetrics } from '../../src/metrics/metrics.js'
import { instrumentStore } from '../../src/metrics/store.js'
import type { Store } from '../../src/store/store.js'
import { parseMetrics, sampleValue } from '../helpers.js'

test('a hot histogram exposes cumulative buckets, +Inf, sum and count; a value on a bound counts in that bound\'s bucket', async () => {
  const registry = new Registry()
  const histogram = new HotHistogram({ name: 'test_seconds', help: 'Test.', labelNames: ['kind'], buckets: [0.1, 1, 0.01], registers: [registry] })
  const fast = histogram.series({ kind: 'fast' })
  assert.equal(histogram.series({ kind: 'fast' }), fast, 'the same labels give the same series')
  for (const value of [0.005, 0.01, 0.5, 1, 7]) fast.observe(value)
  histogram.series({ kind: 'idle' })
  const text = await registry.metrics()
  assert.match(text, /^# HELP test_seconds Test\.\n# TYPE test_seconds histogram\n/)
  const samples = parseMetrics(text)
  const bucket = (kind: string, le: string): number | undefined => sampleValue(samples, 'test_seconds_bucket', { kind, le })
  assert.deepEqual(['0.01', '0.1', '1', '+Inf'].map(le => bucket('fast', le)), [2, 2, 4, 5])
  assert.equal(sampleValue(samples, 'test_seconds_count', { kind: 'fast' }), 5)
  assert.ok(Math.abs(sampleValue(samples, 'test_seconds_sum', { kind: 'fast' })! - 8.515) < 1e-9)
  assert.deepEqual(['0.01', '+Inf'].map(le => bucket('idle', le)), [0, 0], 'a series without observations shows zeros')
  registry.resetMetrics()
  assert.equal(sampleValue(parseMetrics(await registry.metrics()), 'test_seconds_count', { kind: 'fast' }), 0)
})

/** A store whose every call waits for the test to settle it. */
function heldStore (): { store: Store, settle: Array<(outcome: { value?: unknown, error?: Error }) => void> } {
  const settle: Array<(outcome: { value?: unknown, error?: Error }) => void> = []
  const held = (): Promise<unknown> => new Promise((resolve, reject) => settle.push(({ value, error }) => error === undefined ? resolve(value) : reject(error)))
  // What the instrumentation sets on the store (onCommit) stays set; every other member is a held call.
  const store = new Proxy({}, { get: (target, name) => Reflect.get(target, name) ?? held }) as Store
  return { store, settle }
}

test('the instrumented store times each call by operation, counts calls in flight, and counts failures by kind, passing every outcome on unchanged', async () => {
  const metrics = createMetrics()
  const { store, settle } = heldStore()
  const instrumented = instrumentStore(store, metrics)
  const calls = [
    instrumented.create({ id: 1n, name: 'a' }),
    instrumented.create({ id: 2n, name: 'b' }),
    instrumented.create({ id: 3n, name: 'c' }),
    instrumented.get(1n),
    instrumented.replace(1n, { name: '\u0000' }),
    instrumented.remove(1n)
  ].map(call => call.then(value => ({ value }), (error: Error) => ({ error })))
  let samples = parseMetrics(await metrics.registry.metrics())
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'create' }), 3)
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'get' }), 1)
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'list' }), 0)

  const capacity = new StoreUnavailableError('full', 'capacity')
  const deadline = new StoreUnavailableError('late', 'deadline')
  const unstorable = new UnstorableTextError('NUL')
  const bug = new Error('bug')
  settle[0]({ value: 'created' })
  settle[1]({ error: capacity })
  settle[2]({ error: deadline })
  settle[3]({ value: undefined })
  settle[4]({ error: unstorable })
  settle[5]({ error: bug })
  const outcomes = await Promise.all(calls)
  assert.deepEqual(outcomes, [{ value: 'created' }, { error: capacity }, { error: deadline }, { value: undefined }, { error: unstorable }, { error: bug }])
  // The very errors the store threw, not look-alikes: callers may tell them apart by identity.
  for (const [i, error] of [[1, capacity], [2, deadline], [4, unstorable], [5, bug]] as const) assert.equal((outcomes[i] as { error: Error }).error, error)

  samples = parseMetrics(await metrics.registry.metrics())
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'create' }), 0)
  assert.equal(sampleValue(samples, 'plantstore_store_operation_duration_seconds_count', { operation: 'create' }), 3, 'failures are timed too')
  assert.equal(sampleValue(samples, 'plantstore_store_operation_duration_seconds_count', { operation: 'get' }), 1)
  for (const [operation, kind] of [['create', 'capacity'], ['create', 'deadline'], ['replace', 'refused'], ['remove', 'internal']]) {
    assert.equal(sampleValue(samples, 'plantstore_store_errors_total', { operation, kind }), 1, `${operation} ${kind}`)
  }
  assert.equal(samples.filter(s => s.name === 'plantstore_store_errors_total').length, 4, 'no other failure counted')
})

test('the instrumented store observes the group commits its store reports, and shows none until the first', async () => {
  const metrics = createMetrics()
  const { store: bare } = heldStore()
  instrumentStore(bare, metrics)
  assert.equal(sampleValue(parseMetrics(await metrics.registry.metrics()), 'plantstore_store_group_commit_writes_count'), undefined)
  bare.onCommit?.(1)
  bare.onCommit?.(40)
  const samples = parseMetrics(await metrics.registry.metrics())
  assert.equal(sampleValue(samples, 'plantstore_store_group_commit_writes_count'), 2)
  assert.equal(sampleValue(samples, 'plantstore_store_group_commit_writes_sum'), 41)
  assert.equal(sampleValue(samples, 'plantstore_store_group_commit_writes_bucket', { le: '32' }), 1)
  assert.equal(sampleValue(samples, 'plantstore_store_group_commit_writes_bucket', { le: '64' }), 2)
})

test('the process metrics are collected once per process, however many apps build their metrics', () => {
  const [first, second] = [createMetrics(), createMetrics()]
  const processMetric = first.registry.getSingleMetric('process_cpu_seconds_total')
  assert.ok(processMetric !== undefined, 'the process metrics are in the registry')
  assert.equal(second.registry.getSingleMetric('process_cpu_seconds_total'), processMetric, 'one collector, shared')
  assert.notEqual(second.registry.getSingleMetric('plantstore_http_requests_total'), first.registry.getSingleMetric('plantstore_http_requests_total'), 'each app counts its own requests')
  assert.ok(second.registry.getSingleMetric('plantstore_store_operations_in_flight') !== undefined, 'the metrics registered last are merged in too')
})

test('the workers\' metrics are summed in the order of their ids, whatever order they answered in: a floating-point sum is the same every time', async () => {
  /** What worker `id` answers: its registry's metrics, a counter at `value`. */
  const answer = async (id: number, value: number): Promise<[number, Awaited<ReturnType<Registry['getMetricsAsJSON']>>]> => {
    const registry = new Registry()
    new Counter({ name: 'test_seconds_total', help: 'Test.', registers: [registry] }).inc(value)
    return [id, await registry.getMetricsAsJSON()]
  }
  const summed = async (answers: Array<[number, number]>): Promise<number | undefined> =>
    sampleValue(parseMetrics(await summedInOrder(new Map(await Promise.all(answers.map(async ([id, value]) => await answer(id, value)))))), 'test_seconds_total')
  // 0.1 + 0.2 + 0.3 is 0.6000000000000001; 0.3 + 0.2 + 0.1 is 0.6.
  const inIdOrder = await summed([[1, 0.1], [2, 0.2], [3, 0.3]])
  assert.equal(inIdOrder, 0.1 + 0.2 + 0.3)
  for (const arrival of [[[3, 0.3], [2, 0.2], [1, 0.1]], [[2, 0.2], [3, 0.3], [1, 0.1]]] as Array<Array<[number, number]>>) {
    assert.equal(await summed(arrival), inIdOrder, JSON.stringify(arrival))
  }
})
