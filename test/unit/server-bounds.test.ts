// The HTTP server's own bounds, as set: those measured in minutes are too slow to wait out in a
// test (the black-box tests check the Keep-Alive header that announces one, and the 408s).
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { buildApp } from '../../src/app.js'
import { KEEP_ALIVE_TIMEOUT_MS } from '../../src/http-server.js'
import type { Store } from '../../src/store/store.js'

async function serverWith (requestTimeout: number): Promise<{ keepAliveTimeout: number, timeout: number, requestTimeout: number, close: () => Promise<void> }> {
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout }, store: new Proxy({}, { get: () => async () => undefined }) as Store })
  return { keepAliveTimeout: app.server.keepAliveTimeout, timeout: app.server.timeout, requestTimeout: app.server.requestTimeout, close: async () => await app.close() }
}

test('a connection idle between requests, or whose answer its client stops reading, is closed after 72 s without a byte moving; never before a late request gets its 408', async (t) => {
  assert.equal(KEEP_ALIVE_TIMEOUT_MS, 72_000)
  const usual = await serverWith(10)
  t.after(usual.close)
  assert.equal(usual.keepAliveTimeout, KEEP_ALIVE_TIMEOUT_MS, 'idle between requests')
  assert.equal(usual.timeout, KEEP_ALIVE_TIMEOUT_MS, 'no byte either way while a request is under way: above a long poll\'s 60 s')
  // REQUEST_TIMEOUT goes up to an hour: a request that slow to arrive is answered 408, not dropped.
  const patient = await serverWith(3600)
  t.after(patient.close)
  assert.equal(patient.requestTimeout, 3_600_000)
  assert.ok(patient.timeout > patient.requestTimeout, `the socket's own timeout (${patient.timeout} ms) comes after the 408`)
})
