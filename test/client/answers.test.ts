// What the client sends, and what it makes of answers the plantstore server does not give but a
// proxy or another server may: a stand-in HTTP server on loopback that records each request.
import assert from 'node:assert/strict'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { test, type TestContext } from 'node:test'
import { createClient, type PlantstoreClient } from '../../src/client/index.js'
import { refusal } from './refusal.js'

interface Seen { method: string, url: string, headers: Record<string, unknown>, body: string }
interface Answer { status: number, headers?: Record<string, string>, body?: string }

/** A client of a stand-in server under the path /api/ that gives `answer` (or what it makes of the request) to every request. */
async function standIn (t: TestContext, answer: Answer | ((request: Seen) => Answer)): Promise<{ client: PlantstoreClient, seen: Seen[] }> {
  const seen: Seen[] = []
  const server = createServer((request, response) => {
    let body = ''
    request.setEncoding('utf8').on('data', (chunk: string) => { body += chunk }).on('end', () => {
      seen.push({ method: request.method ?? '', url: request.url ?? '', headers: request.headers, body })
      const { status, headers, body: text } = typeof answer === 'function' ? answer(seen.at(-1)!) : answer
      response.writeHead(status, headers).end(text)
    })
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise(resolve => server.close(resolve)))
  const { port } = server.address() as AddressInfo
  return { client: createClient({ baseUrl: `http://127.0.0.1:${port}/api/`, token: 'pst_x' }), seen }
}

test('a body goes out as exact JSON, ids as digits, an absent tag left out; paths keep the base URL\'s prefix', async (t) => {
  const bodies: Record<string, string> = { POST: '{"name":"Fern"}', PUT: '{"id":1,"name":"Moss"}', GET: '[]' }
  const { client, seen } = await standIn(t, ({ method }) => ({ status: 200, body: bodies[method] }))
  await client.createPlant({ id: 2n ** 63n - 1n, name: 'Fern "🌿"' })
  await client.replacePlant(-(2n ** 63n), { name: 'Moss', tag: 'shade' })
  await client.listPlants({ limit: 5, tag: 'a&b', after: 2n ** 53n + 1n })
  assert.deepEqual(seen.map(({ method, url, body }) => [method, url, body]), [
    ['POST', '/api/plants', '{"id":9223372036854775807,"name":"Fern \\"🌿\\""}'],
    ['PUT', '/api/plants/-9223372036854775808', '{"name":"Moss","tag":"shade"}'],
    ['GET', '/api/plants?limit=5&tag=a%26b&after=9007199254740993', '']
  ])
  assert.equal(seen[0].headers.authorization, 'Bearer pst_x')
  assert.equal(seen[0].headers['content-type'], 'application/json')
  assert.equal(seen[2].headers['content-type'], undefined, 'no body, no content type')
})

test('the next page is the link whose rel includes "next", among several links', async (t) => {
  const link = '</api/plants?limit=1&after=5>; rel="prev", </api/plants?limit=1&tag=x&after=9223372036854775806>; title="on"; rel="last next"'
  const { client } = await standIn(t, { status: 200, headers: { link }, body: '[{"id":9223372036854775805,"name":"a"}]' })
  assert.deepEqual(await client.listPlants(), { plants: [{ id: 2n ** 63n - 3n, name: 'a' }], next: { limit: 1, tag: 'x', after: 2n ** 63n - 2n } })
})

test('a failure without an Error body (a proxy\'s page) is a PlantstoreError with its status and no body', async (t) => {
  const { client } = await standIn(t, { status: 502, headers: { 'content-type': 'text/html', 'retry-after': '7' }, body: '<h1>Bad gateway</h1>' })
  const error = await refusal(client.getPlant(1n))
  assert.equal(error.status, 502)
  assert.equal(error.body, undefined)
  assert.equal(error.retryAfter, 7)
  assert.match(error.message, /502/)
})

test('a success whose body is not JSON is a PlantstoreError, not a plant', async (t) => {
  const { client } = await standIn(t, { status: 200, headers: { 'content-type': 'text/html' }, body: '<html>' })
  const error = await refusal(client.getPlant(1n))
  assert.equal(error.status, 200)
  assert.match(error.message, /not JSON/)
})
