import assert from 'node:assert/strict'
import { test } from 'node:test'
import pino from 'pino'
import { buildApp } from '../../src/app.js'
import { StoreUnavailableError } from '../../src/errors.js'
import { ALL_SCOPES, type Store } from '../../src/store/store.js'
import { digestOf } from '../../src/tokens.js'

const TOKEN = `pst_${'a'.repeat(43)}`

/**
 * A store whose storage is gone for plants (every call fails the way a lost disk or writer
 * does) but which still knows the token, so that requests get past auth and reach the store.
 */
function storeWithoutStorage (calls: string[]): Store {
  const token = { record: { id: 1, name: 'test', scopes: ALL_SCOPES, createdAt: new Date() }, digest: digestOf(TOKEN) }
  return new Proxy({}, {
    get: (_target, method: string) => async () => {
      if (method === 'findToken') return token
      calls.push(method)
      throw new StoreUnavailableError('disk unplugged at /secret/path')
    }
  }) as Store
}

test('an unreachable store is 503 with Retry-After and the Error body, never its internals', async (t) => {
  const calls: string[] = []
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout: 10 }, store: storeWithoutStorage(calls) })
  t.after(() => app.close())
  const requests = [
    ['GET', '/readyz', undefined, 'ping'], ['GET', '/plants/1', undefined, 'get'], ['GET', '/plants', undefined, 'list'],
    ['POST', '/plants', { id: 1, name: 'Fern' }, 'create'], ['PUT', '/plants/1', { name: 'Fern' }, 'replace'], ['DELETE', '/plants/1', undefined, 'remove']
  ] as const
  for (const [method, url, payload, reached] of requests) {
    const res = await app.inject({ method, url, payload, headers: { authorization: `Bearer ${TOKEN}` } })
    assert.equal(res.statusCode, 503, `${method} ${url}: ${res.body}`)
    assert.equal(calls.at(-1), reached, `${method} ${url} reached the store's ${reached}`)
    assert.equal(res.headers['retry-after'], '1')
    assert.deepEqual(Object.keys(res.json()).sort(), ['error', 'message'])
    assert.equal(res.json().error, 503)
    assert.doesNotMatch(res.body, /secret|unplugged/)
  }
})

test('a bug is 500 with the Error body; the log has the error and the request id, the answer neither', async (t) => {
  const lines: string[] = []
  const log = pino({ level: 'warn' }, { write: (line: string) => { lines.push(line) } })
  const buggyStore = new Proxy({}, { get: () => async () => { throw new TypeError('undefined is not a plant at /secret/path') } }) as Store
  const app = await buildApp({ config: { logLevel: 'warn', rateLimitPerMinute: 0, requestTimeout: 10 }, store: buggyStore, log })
  t.after(() => app.close())
  const res = await app.inject({ method: 'GET', url: '/readyz' })
  assert.equal(res.statusCode, 500)
  assert.deepEqual(Object.keys(res.json()).sort(), ['error', 'message'])
  assert.doesNotMatch(res.body, /secret|plant at/)
  assert.equal(lines.length, 1, 'one line: the failure, no request line at warn')
  const line = JSON.parse(lines[0])
  assert.equal(line.msg, 'request failed')
  assert.match(line.reqId, /^[0-9a-f]{16}-[0-9a-z]+$/)
  assert.match(line.err.message, /undefined is not a plant/)
})

test('storage trouble is logged at warn, at most once a second, counting what it refused', async (t) => {
  const lines: string[] = []
  const log = pino({ level: 'warn' }, { write: (line: string) => { lines.push(line) } })
  const app = await buildApp({ config: { logLevel: 'warn', rateLimitPerMinute: 0, requestTimeout: 10 }, store: storeWithoutStorage([]), log })
  t.after(() => app.close())
  for (let i = 0; i < 50; i++) {
    assert.equal((await app.inject({ method: 'GET', url: '/plants/1', headers: { authorization: `Bearer ${TOKEN}` } })).statusCode, 503)
  }
  const logged = lines.map(line => JSON.parse(line))
  assert.equal(logged.length, 1, 'one line for 50 refusals within a second')
  assert.equal(logged[0].level, 40)
  assert.equal(logged[0].refused, 1)
  assert.match(logged[0].cause, /disk unplugged/, 'the log names the cause; the answer does not')
})
