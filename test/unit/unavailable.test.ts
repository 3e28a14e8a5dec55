import assert from 'node:assert/strict'
import { test } from 'node:test'
import pino from 'pino'
import { buildApp } from '../../src/app.js'
import { StoreUnavailableError } from '../../src/errors.js'
import type { Store } from '../../src/store/store.js'

/** A store whose storage is gone: every call fails the way a lost disk or writer does. */
const brokenStore = new Proxy({}, {
  get: () => async () => { throw new StoreUnavailableError('disk unplugged at /secret/path') }
}) as Store

test('an unreachable store is 503 with Retry-After and the Error body, never its internals', async (t) => {
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout: 10 }, store: brokenStore })
  t.after(() => app.close())
  for (const [method, url] of [['GET', '/readyz'], ['GET', '/plants/1']] as const) {
    const res = await app.inject({ method, url, headers: { authorization: `Bearer pst_${'a'.repeat(43)}` } })
    assert.equal(res.statusCode, 503, url)
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
  assert.match(line.reqId, /^[0-9a-f-]{36}$/)
  assert.match(line.err.message, /undefined is not a plant/)
})
