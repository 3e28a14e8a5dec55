// The HTTP server's own bounds. Those measured in minutes are too slow to wait out in a test: their
// values are checked here as set, and the mechanism that applies them is run with short ones.
import assert from 'node:assert/strict'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp } from '../../src/app.js'
import { httpServer, KEEP_ALIVE_TIMEOUT_MS, stalledAfterMs } from '../../src/http-server.js'
import type { Store } from '../../src/store/store.js'

async function serverWith (requestTimeout: number): Promise<{ keepAliveTimeout: number, timeout: number, requestTimeout: number, close: () => Promise<void> }> {
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout }, store: new Proxy({}, { get: () => async () => undefined }) as Store })
  return { keepAliveTimeout: app.server.keepAliveTimeout, timeout: app.server.timeout, requestTimeout: app.server.requestTimeout, close: async () => await app.close() }
}

test('a connection idle between requests is closed after 72 s; one on which no byte moves, after 75 s: past a long poll\'s 60 s, never before a late request gets its 408', async (t) => {
  assert.equal(KEEP_ALIVE_TIMEOUT_MS, 72_000)
  const usual = await serverWith(10)
  t.after(usual.close)
  assert.equal(usual.keepAliveTimeout, KEEP_ALIVE_TIMEOUT_MS, 'idle between requests')
  assert.equal(usual.timeout, 0, 'Node\'s own socket timeout is off: the server closes stalled connections itself')
  assert.equal(stalledAfterMs(10_000), 75_000, 'no byte either way: after Node closes an idle connection (72 s and its second)')
  // REQUEST_TIMEOUT goes up to an hour: a request that slow to arrive is answered 408, not dropped.
  const patient = await serverWith(3600)
  t.after(patient.close)
  assert.equal(patient.requestTimeout, 3_600_000)
  assert.ok(stalledAfterMs(3_600_000) > patient.requestTimeout, `a stalled connection (${stalledAfterMs(3_600_000)} ms) is closed after the 408`)
})

/**
 * The service's HTTP server (src/http-server.ts) answering every request with `chunks` writes of
 * 64 KiB after `delayMs`, its stalled connections closed after `stalledMs`; `closed` has how long
 * each connection it closed was open, in order.
 */
async function answering (t: { after: (fn: () => unknown) => void }, chunks: number, stalledMs: number, delayMs = 0): Promise<{ port: number, closed: () => Promise<number> }> {
  const chunk = 'x'.repeat(64 * 1024)
  const server = httpServer(10_000, undefined, stalledMs)((_request, response) => {
    setTimeout(() => {
      let written = 0
      const more = (): void => {
        while (written < chunks - 1) {
          written++
          if (!response.write(chunk)) {
            response.once('drain', more)
            return
          }
        }
        response.end(chunk)
      }
      more()
    }, delayMs)
  }, {})
  const closings: Array<Promise<number>> = []
  server.on('connection', (socket: Socket) => {
    const opened = performance.now()
    closings.push(new Promise(resolve => socket.once('close', () => resolve(performance.now() - opened))))
  })
  server.listen(0, '127.0.0.1')
  await new Promise(resolve => server.once('listening', resolve))
  t.after(() => { server.closeAllConnections(); server.close() })
  let next = 0
  return {
    port: (server.address() as AddressInfo).port,
    closed: async () => await Promise.race([closings[next++], sleep(5000).then(() => Infinity)])
  }
}

/** A raw connection to `port`, its errors (a reset) ignored. */
async function connection (port: number): Promise<Socket> {
  const socket = connect(port, '127.0.0.1')
  socket.on('error', () => {})
  await new Promise(resolve => socket.once('connect', resolve))
  return socket
}

const GET = 'GET / HTTP/1.1\r\nHost: x\r\n\r\n'

test('a client that stops reading its answer has its connection closed once no byte has moved for the limit', async (t) => {
  const server = await answering(t, 512, 300) // 32 MiB: more than the kernel's buffers hold
  const socket = await connection(server.port)
  socket.pause() // reads nothing: the buffers fill, then nothing moves
  socket.write(GET)
  const after = await server.closed()
  assert.ok(after >= 300 && after < 3000, `closed after ${after.toFixed(0)} ms`)
})

test('a client that reads its answer slowly, bytes moving all along, gets all of it however long that takes', async (t) => {
  const chunks = 160
  const server = await answering(t, chunks, 300)
  const socket = await connection(server.port)
  let received = 0
  socket.on('data', (chunk: Buffer) => {
    received += chunk.length
    socket.pause()
    setTimeout(() => socket.resume(), 25)
  })
  socket.write(GET)
  const started = performance.now()
  const whole = new Promise<boolean>(resolve => socket.on('data', () => { if (received >= chunks * 64 * 1024) resolve(true) }))
  assert.ok(await Promise.race([whole, sleep(20_000).then(() => false)]), `${received} bytes received`)
  // Past a few looks for stalled connections (one a second), or the test says nothing.
  assert.ok(performance.now() - started > 2500, `the answer was read in ${(performance.now() - started).toFixed(0)} ms`)
})

test('a connection on which nothing is sent is closed after the limit; an answer that comes before it is given', async (t) => {
  const server = await answering(t, 1, 400, 300)
  const silent = await connection(server.port)
  t.after(() => silent.destroy())
  const asking = await connection(server.port)
  t.after(() => asking.destroy())
  asking.write(GET)
  let received = ''
  asking.on('data', (chunk: Buffer) => { received += chunk.toString('latin1') })
  const after = await server.closed()
  assert.ok(after >= 400 && after < 3000, `the silent connection closed after ${after.toFixed(0)} ms`)
  assert.match(received, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nx{65536}$/, 'the answer that came at 300 ms, whole')
})
