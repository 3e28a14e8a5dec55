// What the metrics add to a request, in-process, ns per call: prom-client's own histogram
// observe and counter inc on children from labels(), against the Series the service keeps
// (src/metrics/histogram.ts); the request hook's work (two clock readings, a 'close' listener,
// a map lookup, an observation), and a store call with and without the instrumentation.
// Usage: node --import tsx scripts/bench-metrics.ts [CALLS (1000000)]
import { EventEmitter } from 'node:events'
import { Counter, Histogram } from 'prom-client'
import { createMetrics } from '../src/metrics/metrics.js'
import { instrumentStore } from '../src/metrics/store.js'
import type { Store } from '../src/store/store.js'

const CALLS = Number(process.argv[2] ?? 1_000_000)
const labels = ['method', 'route', 'status'] as const
const buckets = [0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const histogram = new Histogram({ name: 'h', help: 'h', labelNames: labels, buckets, registers: [] }).labels('POST', '/plants', '200')
const counter = new Counter({ name: 'c', help: 'c', labelNames: labels, registers: [] }).labels('POST', '/plants', '200')
const metrics = createMetrics()
const series = metrics.requests.series({ method: 'POST', route: '/plants', status: '200' })
const known = new Map([['POST /plants 200', series]])
const bare = new Proxy({}, { get: (target, name) => Reflect.get(target, name) ?? (async () => 'created') }) as Store
const instrumented = instrumentStore(bare, metrics)

function ns (work: () => void): number {
  const start = performance.now()
  for (let i = 0; i < CALLS; i++) work()
  return (performance.now() - start) * 1e6 / CALLS
}

async function nsAsync (work: () => Promise<unknown>): Promise<number> {
  const start = performance.now()
  for (let i = 0; i < CALLS / 10; i++) await work()
  return (performance.now() - start) * 1e7 / CALLS
}

for (let round = 1; round <= 3; round++) {
  const figures = {
    'prom-client observe + inc': ns(() => { histogram.observe(0.0012); counter.inc() }),
    'Series.observe': ns(() => series.observe(0.0012)),
    'emitter + close listener': ns(() => { const response = new EventEmitter(); response.once('close', () => {}); response.emit('close') }),
    'the same + the hook\'s work': ns(() => {
      const start = performance.now()
      const response = new EventEmitter()
      response.once('close', () => { known.get(`POST ${'/plants'} ${200}`)?.observe((performance.now() - start) / 1000) })
      response.emit('close')
    }),
    'store call': await nsAsync(() => bare.create({ id: 1n, name: 'a' })),
    'instrumented store call': await nsAsync(() => instrumented.create({ id: 1n, name: 'a' }))
  }
  console.log(`round ${round}: ` + Object.entries(figures).map(([name, value]) => `${name} ${value.toFixed(0)} ns`).join(', '))
}
