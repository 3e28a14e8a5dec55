import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { test } from 'node:test'
import { clientTypes, TYPES_FILE } from '../../scripts/gen-client.js'
import type { ListQuery, NewPlant, PlantRecord } from '../../src/client/index.js'

test('src/client/openapi.ts is exactly what openapi-typescript makes of openapi/plantstore.json', async () => {
  assert.ok(readFileSync(TYPES_FILE, 'utf8') === await clientTypes(),
    'src/client/openapi.ts has drifted from openapi/plantstore.json: run `npm run gen:client` and commit the result.')
})

// Checked by the type checker (npm run typecheck): the document's int64 fields are bigints.
type Same<A, B> = [A] extends [B] ? [B] extends [A] ? true : false : false
type Expect<T extends true> = T
export type Int64s = [
  Expect<Same<NewPlant['id'], bigint>>,
  Expect<Same<PlantRecord['id'], bigint>>,
  Expect<Same<ListQuery['after'], bigint | undefined>>,
  Expect<Same<ListQuery['limit'], number | undefined>>
]
