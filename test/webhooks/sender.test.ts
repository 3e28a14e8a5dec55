// The sender's connection-time SSRF check (SPEC section 5): the address actually connected to is
// checked on every attempt, so a name that resolves to loopback only after registration (DNS
// rebinding), or a URL holding a private address, reaches nothing without WEBHOOKS_ALLOW_PRIVATE.
import assert from 'node:assert/strict'
import type { LookupAddress } from 'node:dns'
import { test } from 'node:test'
import type { ClaimedDelivery } from '../../src/store/webhooks.js'
import { reasonOf, Sender } from '../../src/webhooks/sender.js'
import { startReceiver } from '../receiver.js'

/** A resolver we control: every name resolves to `address`, in dns.lookup's callback shapes. */
function resolvingTo (address: string): any {
  return (_host: string, options: { all?: boolean }, callback: (error: Error | null, address: string | LookupAddress[], family?: number) => void) => {
    if (options.all === true) callback(null, [{ address, family: 4 }])
    else callback(null, address, 4)
  }
}

const delivery = (url: string): ClaimedDelivery => ({ id: 1, webhookId: 1, position: 7n, type: 'plant.created', plant: { id: 2n ** 63n - 1n, name: 'Fern' }, attempts: 0, url, secrets: ['whsec_' + Buffer.alloc(32).toString('base64')], leaseUntil: new Date() })

test('a name that resolves to loopback when the attempt is made is refused before connecting; with WEBHOOKS_ALLOW_PRIVATE it is reached', async (t) => {
  const receiver = await startReceiver(t)
  const refusing = new Sender({ allowPrivate: false, timeoutMs: 2000, resolve: resolvingTo('127.0.0.1') })
  t.after(() => refusing.close())
  const refused = await refusing.attempt(delivery(`http://rebound.example:${receiver.port}/hook`), new Date())
  assert.equal(refused.statusCode, undefined)
  assert.match(refused.error ?? '', /^refused: .*127\.0\.0\.1/)
  assert.equal(receiver.received.length, 0, 'no request reached the address')

  const allowing = new Sender({ allowPrivate: true, timeoutMs: 2000, resolve: resolvingTo('127.0.0.1') })
  t.after(() => allowing.close())
  const reached = await allowing.attempt(delivery(`http://rebound.example:${receiver.port}/hook`), new Date())
  assert.equal(reached.statusCode, 204)
  assert.equal(receiver.received.length, 1)
  assert.equal(receiver.received[0].body, '{"id":9223372036854775807,"name":"Fern"}')
})

test('a URL holding a private address is refused at every attempt, whatever was stored', async (t) => {
  const receiver = await startReceiver(t)
  const sender = new Sender({ allowPrivate: false, timeoutMs: 2000 })
  t.after(() => sender.close())
  for (const host of ['127.0.0.1', '[::ffff:127.0.0.1]', '[::1]', '169.254.169.254', '10.1.2.3']) {
    const result = await sender.attempt(delivery(`http://${host}:${receiver.port}/`), new Date())
    assert.match(result.error ?? '', /^refused: /, host)
  }
  assert.equal(receiver.received.length, 0)
})

test('a kept-alive connection to a receiver is reused, and closed once idle', async (t) => {
  const receiver = await startReceiver(t)
  const sender = new Sender({ allowPrivate: true, timeoutMs: 2000, idleSocketMs: 200 })
  t.after(() => sender.close())
  const ports = new Set<number>()
  receiver.answer = (_request, response) => { ports.add(response.socket!.remotePort!); response.writeHead(204).end() }
  const first = await sender.attempt(delivery(`http://127.0.0.1:${receiver.port}/`), new Date())
  const second = await sender.attempt(delivery(`http://127.0.0.1:${receiver.port}/`), new Date())
  assert.deepEqual([first.statusCode, second.statusCode, ports.size], [204, 204, 1], 'one connection for both')
  await new Promise(resolve => setTimeout(resolve, 600))
  await sender.attempt(delivery(`http://127.0.0.1:${receiver.port}/`), new Date())
  assert.equal(ports.size, 2, 'the idle connection was closed; a new one was opened')
})

test('a URL stored with port 0 is refused at every attempt, not sent to the scheme\'s default port', async (t) => {
  const sender = new Sender({ allowPrivate: true, timeoutMs: 2000, resolve: resolvingTo('127.0.0.1') })
  t.after(() => sender.close())
  for (const url of ['http://hooks.example:0/', 'https://127.0.0.1:0/hook']) {
    const result = await sender.attempt(delivery(url), new Date())
    assert.deepEqual([result.statusCode, result.error], [undefined, 'refused: port 0 names no port to connect to'], url)
  }
})

test('a receiver that does not speak TLS at an https URL: the attempt\'s error is one line that says why, without OpenSSL\'s internals', async (t) => {
  const receiver = await startReceiver(t) // plain HTTP
  const sender = new Sender({ allowPrivate: true, timeoutMs: 2000 })
  t.after(() => sender.close())
  const result = await sender.attempt(delivery(`https://127.0.0.1:${receiver.port}/hook`), new Date())
  assert.equal(result.statusCode, undefined)
  assert.match(result.error ?? '', /^[^\n]*TLS: wrong version number[^\n]*\(E[A-Z_]+\)$/, JSON.stringify(result.error))
  assert.doesNotMatch(result.error ?? '', /deps|openssl|\.c:|:error:/i)
})

test('OpenSSL\'s error text is cut to its reason, and what follows it is kept', () => {
  const cases: Array<[string, string | undefined, string]> = [
    ['write EPROTO 801CCF3DB97F0000:error:0A00010B:SSL routines:ssl3_get_record:wrong version number:../deps/openssl/openssl/ssl/record/ssl3_record.c:350:\n', 'EPROTO', 'write EPROTO TLS: wrong version number (EPROTO)'],
    ['C0B7E3F7:error:0A000410:SSL routines:ssl3_read_bytes:sslv3 alert handshake failure:../deps/openssl/openssl/ssl/record/rec_layer_s3.c:1605:SSL alert number 40\n', 'ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE', 'TLS: sslv3 alert handshake failure; SSL alert number 40 (ERR_SSL_SSLV3_ALERT_HANDSHAKE_FAILURE)'],
    ['error:0A000086:SSL routines::certificate verify failed', undefined, 'TLS: certificate verify failed'],
    ['connect ECONNREFUSED 127.0.0.1:9', 'ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:9 (ECONNREFUSED)']
  ]
  for (const [message, code, expected] of cases) assert.equal(reasonOf(Object.assign(new Error(message), code === undefined ? {} : { code })), expected)
})
