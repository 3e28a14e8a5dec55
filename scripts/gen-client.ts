// Generates src/client/openapi.ts, the client's types, from the OpenAPI document:
// `npm run gen:client`. test/client/types.test.ts fails when the committed file drifts from it.
import { writeFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import openapiTS, { astToString, COMMENT_HEADER } from 'openapi-typescript'
import ts from 'typescript'

export const DOCUMENT = new URL('../openapi/plantstore.json', import.meta.url)
export const TYPES_FILE = new URL('../src/client/openapi.ts', import.meta.url)

const BIGINT = ts.factory.createKeywordTypeNode(ts.SyntaxKind.BigIntKeyword)

/**
 * The text of src/client/openapi.ts. Every `format: int64` becomes `bigint`, not the generator's
 * `number`: the client reads and writes int64 exactly, and a number cannot hold ids beyond 2^53.
 */
export async function clientTypes (): Promise<string> {
  const nodes = await openapiTS(DOCUMENT, {
    transform: schema => schema.format === 'int64' ? BIGINT : undefined
  })
  return COMMENT_HEADER.replace(' */', ' * Regenerate it with `npm run gen:client`.\n */') + astToString(nodes)
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  writeFileSync(TYPES_FILE, await clientTypes())
}
