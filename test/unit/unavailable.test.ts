import assert from 'node:assert/strict'
import { test } from 'node:test'
import { buildApp } from '../../src/app.js'
import { StoreUnavailableError } from '../../src/errors.js'
import type { Store } from '../../src/store/store.js'

/** A store whose storage is gone: every call fails the way a lost disk or writer does. */
const brokenStore = new Proxy({}, {
  get: () => async () => { throw new StoreUnavailableError('disk unplugged at /secret/path') }
}) as Store

test('an unreachable store is 503 with Retry-After and the Error body, never its internals', async (t) => {
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0 }, store: brokenStore })
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
