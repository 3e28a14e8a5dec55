// The HTTP server's own bounds, as set: those measured in minutes are too slow to wait out in a
// test (the black-box tests check the Keep-Alive header that announces one, and the header count).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { buildApp, KEEP_ALIVE_TIMEOUT_MS } from '../../src/app.js'
import type { Store } from '../../src/store/store.js'

test('a connection idle between requests, or whose answer its client stops reading, is closed after 72 s without a byte moving', async (t) => {
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout: 10 }, store: new Proxy({}, { get: () => async () => undefined }) as Store })
  t.after(() => app.close())
  assert.equal(KEEP_ALIVE_TIMEOUT_MS, 72_000)
  assert.equal(app.server.keepAliveTimeout, KEEP_ALIVE_TIMEOUT_MS, 'idle between requests')
  assert.equal(app.server.timeout, KEEP_ALIVE_TIMEOUT_MS, 'no byte either way while a request is under way: above a long poll\'s 60 s')
})
