// The /docs page's indenter (src/routes/indent-json.ts): JSON.stringify's indentation, numbers as written.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import vm from 'node:vm'
import { indentJson } from '../../src/routes/indent-json.js'

const samples = [
  '{"id":1,"name":"Fern","tag":"shade"}',
  '[{"id":1,"name":"a"},{"id":2,"name":"b"}]',
  '{"error":404,"message":"No plant has this id."}',
  '{"a":[],"b":{},"c":[[],{}],"d":null,"e":true,"f":-1.5}',
  '{"q":"a \\"quoted\\" word, {braces} [brackets] : colons \\\\ and \\\\\\" too","n":"x\\ny"}',
  '[]',
  '"just a string"'
]

test('indents as JSON.stringify(JSON.parse(text), null, 2) does', () => {
  for (const text of samples) assert.equal(indentJson(text), JSON.stringify(JSON.parse(text), null, 2), text)
  // The whitespace a server may put between tokens is dropped as the parse would drop it.
  assert.equal(indentJson('{ "id" : 1 ,\n "name" : "a b" }'), JSON.stringify({ id: 1, name: 'a b' }, null, 2))
})

test('numbers stay as written: an int64 id beyond 2^53 is not rounded', () => {
  assert.equal(indentJson('{"id":9223372036854775807,"name":"Largest"}'), '{\n  "id": 9223372036854775807,\n  "name": "Largest"\n}')
  assert.equal(indentJson('[-9223372036854775808]'), '[\n  -9223372036854775808\n]')
  assert.equal(indentJson('[-1.5e3]'), '[\n  -1.5e3\n]')
  assert.equal(indentJson('["\\u00e9"]'), '[\n  "\\u00e9"\n]', 'an escape as written too')
})

test('its text runs on its own, as the page sends it', () => {
  const sent = vm.runInNewContext(`${indentJson.toString()}; indentJson`) as typeof indentJson
  for (const text of samples) assert.equal(sent(text), indentJson(text))
})
