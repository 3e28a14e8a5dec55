// ns per parse of small JSON bodies: src/json.ts (the one body reader) against JSON.parse, alternating.
// Usage: node --import tsx scripts/bench-json.ts
import { parseJson } from '../src/json.js'
const body = '{"id":123456,"name":"Fern","tag":"shade"}'
const big = '{"id":9223372036854775807,"name":"Fern with a much longer name of some sixty characters","tag":"shade"}'
for (const [label, text] of [['small', body], ['big id', big]]) {
  for (let round = 0; round < 3; round++) {
    for (const [name, fn] of [['JSON.parse', JSON.parse], ['parseJson', parseJson]] as const) {
      const n = 500_000
      const t0 = process.hrtime.bigint()
      for (let i = 0; i < n; i++) fn(text)
      const ns = Number(process.hrtime.bigint() - t0) / n
      console.log(label, name, ns.toFixed(0), 'ns')
    }
  }
}
