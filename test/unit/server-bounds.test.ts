// The HTTP server's own bounds. Those measured in minutes are too slow to wait out in a test: their
// values are checked here as set, and the mechanism that applies them is run with short ones.
import assert from 'node:assert/strict'
import type { ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { buildApp } from '../../src/app.js'
import { httpServer, KEEP_ALIVE_TIMEOUT_MS, stalledAfterMs } from '../../src/http-server.js'
import type { Store } from '../../src/store/store.js'

/** The whole service over a store that answers nothing: its server is what these tests look at. */
async function appWith (requestTimeout: number): ReturnType<typeof buildApp> {
  return await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout }, store: new Proxy({}, { get: () => async () => undefined }) as Store })
}

async function serverWith (requestTimeout: number): Promise<{ keepAliveTimeout: number, timeout: number, requestTimeout: number, close: () => Promise<void> }> {
  const app = await appWith(requestTimeout)
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

/** What a test server does with each request: it writes with `response` as it likes. */
type Answer = (response: ServerResponse) => void

/**
 * The service's HTTP server (src/http-server.ts) answering every request with `answer`, its stalled
 * connections closed after `stalledMs`; `closed()` settles with how long the next connection it
 * closed had been open (Infinity after 6 s), in the order they connected.
 */
async function serving (t: { after: (fn: () => unknown) => void }, answer: Answer, stalledMs: number): Promise<{ port: number, closed: () => Promise<number> }> {
  const server = httpServer(10_000, undefined, stalledMs)((_request, response) => { answer(response) }, {})
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
    closed: async () => await Promise.race([closings[next++], sleep(6000, Infinity, { ref: false })])
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
const MIB = 1024 * 1024

test('a client that stops reading its answer is closed once no byte has moved for the limit, though the answer goes on being written', async (t) => {
  // 32 MiB in one write, more than the kernel's buffers hold; then, as a stream does, more every
  // 100 ms, in text whose size is not its length: none of it is taken, so none of it is movement.
  const server = await serving(t, (response) => {
    response.write(Buffer.alloc(32 * MIB, 'x'))
    const more = setInterval(() => { if (response.destroyed) clearInterval(more); else response.write('é'.repeat(100)) }, 100)
  }, 300)
  const socket = await connection(server.port)
  t.after(() => socket.destroy())
  socket.pause() // reads nothing
  socket.write(GET)
  const after = await server.closed()
  assert.ok(after >= 300 && after < 4000, `closed after ${after.toFixed(0)} ms`)
})

test('requests pipelined behind an answer cut short (its connection closed as stalled) are dropped, never begun: none answers into the closed connection', async (t) => {
  let begun = 0
  const server = await serving(t, (response) => {
    begun++
    response.end(Buffer.alloc(32 * MIB, 'x')) // more than the kernel's buffers hold: it cannot finish while nothing is read
  }, 300)
  const socket = await connection(server.port)
  t.after(() => socket.destroy())
  socket.pause() // reads nothing
  socket.write(GET.repeat(3))
  const after = await server.closed()
  assert.ok(after >= 300 && after < 4000, `closed after ${after.toFixed(0)} ms`)
  await sleep(200)
  assert.equal(begun, 1, 'only the first request began')
})

test('a client that reads a large answer slowly gets all of it however long it takes: one write taken by the kernel a piece at a time moves', async (t) => {
  const size = 12 * MIB
  const server = await serving(t, (response) => { response.end(Buffer.alloc(size, 'x')) }, 300)
  const socket = await connection(server.port)
  t.after(() => socket.destroy())
  let received = 0
  const whole = new Promise<boolean>(resolve => {
    socket.on('data', (chunk: Buffer) => {
      received += chunk.length
      if (received >= size) resolve(true)
      socket.pause()
      setTimeout(() => socket.resume(), 25)
    })
  })
  socket.write(GET)
  const started = performance.now()
  assert.ok(await Promise.race([whole, sleep(30_000, false, { ref: false })]), `${received} bytes received of the answer's head and ${size}`)
  // Past a few looks for stalled connections (one a second), or the test says nothing.
  assert.ok(performance.now() - started > 2500, `the answer was read in ${(performance.now() - started).toFixed(0)} ms`)
})

test('a connection on which nothing is sent is closed after the limit; an answer that comes before it is given', async (t) => {
  const server = await serving(t, (response) => { setTimeout(() => response.end('x'.repeat(65536)), 300) }, 400)
  const silent = await connection(server.port)
  t.after(() => silent.destroy())
  const asking = await connection(server.port)
  t.after(() => asking.destroy())
  asking.write(GET)
  let received = ''
  asking.on('data', (chunk: Buffer) => { received += chunk.toString('latin1') })
  const after = await server.closed()
  assert.ok(after >= 400 && after < 4000, `the silent connection closed after ${after.toFixed(0)} ms`)
  assert.match(received, /^HTTP\/1\.1 200 OK\r\n[^]*\r\n\r\nx{65536}$/, 'the answer that came at 300 ms, whole')
})

test('the service\'s server closes a connection on which nothing moves after 75 looks, one a second, and not at 75', async (t) => {
  t.mock.timers.enable({ apis: ['setInterval'] })
  const app = await appWith(10)
  await app.listen({ port: 0, host: '127.0.0.1' })
  const accepted = new Promise(resolve => app.server.once('connection', resolve))
  const silent = await connection((app.server.address() as AddressInfo).port)
  // The connection first: the server's close waits for it.
  t.after(async () => {
    silent.destroy()
    await app.close()
  })
  const closed = new Promise(resolve => silent.once('close', resolve))
  await accepted
  t.mock.timers.tick(75_000)
  await sleep(200)
  assert.equal(silent.readableEnded, false, 'open after 75 s')
  t.mock.timers.tick(1000)
  assert.equal(await Promise.race([closed.then(() => 'closed'), sleep(2000, 'open', { ref: false })]), 'closed')
})
