import assert from 'node:assert/strict'
import http from 'node:http'
import { connect } from 'node:net'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { rawExchange } from '../raw.js'
import { openStream } from '../sse.js'
import { call, cli, holdWriteLock, isErrorBody, parseMetrics, sampleValue, startServer, type Sample, type Server } from '../helpers.js'

async function scrape (server: Server): Promise<Sample[]> {
  const answer = await call(server, 'GET', '/metrics', { token: null })
  assert.equal(answer.status, 200)
  return parseMetrics(answer.text)
}

/** Each series of `name`, by its labels. */
function seriesOf (samples: Sample[], name: string): Map<string, number> {
  return new Map(samples.filter(s => s.name === name).map(s => [JSON.stringify(s.labels), s.value]))
}

const requests = (samples: Sample[], method: string, route: string, status: string): number =>
  sampleValue(samples, 'plantstore_http_requests_total', { method, route, status }) ?? 0

test('GET /metrics: the Prometheus text format, without a token, like the other operations at its edges', async (t) => {
  const server = await startServer(t)

  await t.test('200 in the text format 0.0.4 with the service\'s and the process\'s metrics, no token needed', async () => {
    const answer = await call(server, 'GET', '/metrics', { token: null })
    assert.equal(answer.status, 200)
    assert.equal(answer.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8')
    for (const [name, type] of [['plantstore_http_requests_total', 'counter'], ['plantstore_http_request_duration_seconds', 'histogram'],
      ['plantstore_http_requests_in_flight', 'gauge'], ['plantstore_http_shed_requests_total', 'counter'],
      ['plantstore_http_refused_before_routing_total', 'counter'],
      ['plantstore_store_operation_duration_seconds', 'histogram'], ['plantstore_store_errors_total', 'counter'],
      ['plantstore_store_operations_in_flight', 'gauge'], ['plantstore_store_group_commit_writes', 'histogram'],
      ['process_cpu_seconds_total', 'counter'], ['process_resident_memory_bytes', 'gauge'], ['nodejs_eventloop_lag_seconds', 'gauge']]) {
      assert.match(answer.text, new RegExp(`^# TYPE ${name} ${type}$`, 'm'), name)
    }
    assert.doesNotThrow(() => parseMetrics(answer.text))
    assert.equal((await call(server, 'HEAD', '/metrics', { token: null })).status, 200)
  })

  await t.test('another method is 405 with Allow, an unknown query parameter 400, both with the Error body', async () => {
    const post = await call(server, 'POST', '/metrics', { token: null, body: {} })
    assert.ok(isErrorBody(post, 405))
    assert.equal(post.headers.get('allow'), 'GET, HEAD')
    assert.ok(isErrorBody(await call(server, 'GET', '/metrics?name=x', { token: null }), 400))
  })

  await t.test('requests are counted by method, route template and status, each with its latency; scrapes of /metrics are not', async () => {
    const before = await scrape(server)
    assert.equal((await call(server, 'POST', '/plants', { body: { id: 7, name: 'Fern' } })).status, 200)
    assert.equal((await call(server, 'POST', '/plants', { body: { id: 7, name: 'Fern' } })).status, 200)
    assert.equal((await call(server, 'POST', '/plants', { body: { id: 7, name: 'Moss' } })).status, 409)
    assert.equal((await call(server, 'GET', '/plants/7')).status, 200)
    assert.equal((await call(server, 'GET', '/plants/8')).status, 404)
    assert.equal((await call(server, 'GET', '/plants/8', { token: 'pst_wrong' })).status, 401)
    assert.equal((await call(server, 'PUT', '/plants/7', { body: { tag: 'no name' } })).status, 400)
    await scrape(server)
    const after = await scrape(server)
    const delta = (method: string, route: string, status: string): number => requests(after, method, route, status) - requests(before, method, route, status)
    assert.equal(delta('POST', '/plants', '200'), 2)
    assert.equal(delta('POST', '/plants', '409'), 1)
    assert.equal(delta('GET', '/plants/{id}', '200'), 1)
    assert.equal(delta('GET', '/plants/{id}', '404'), 1)
    assert.equal(delta('GET', '/plants/{id}', '401'), 1)
    assert.equal(delta('PUT', '/plants/{id}', '400'), 1)
    assert.equal(after.filter(s => s.labels.route === '/metrics').length, 0, 'scrapes are not counted')
    assert.equal(sampleValue(after, 'plantstore_http_requests_in_flight'), 0)
    for (const [labels, count] of seriesOf(after, 'plantstore_http_requests_total')) {
      const { method, route, status } = JSON.parse(labels)
      assert.equal(sampleValue(after, 'plantstore_http_request_duration_seconds_count', { method, route, status }), count, labels)
      assert.equal(sampleValue(after, 'plantstore_http_request_duration_seconds_bucket', { method, route, status, le: '+Inf' }), count, labels)
      assert.ok(sampleValue(after, 'plantstore_http_request_duration_seconds_sum', { method, route, status })! > 0, labels)
    }
  })

  await t.test('store calls are timed by operation, and each commit\'s writes observed', async () => {
    const before = await scrape(server)
    await Promise.all([10, 11, 12].map(id => call(server, 'POST', '/plants', { body: { id, name: 'Ivy' } })))
    assert.equal((await call(server, 'GET', '/plants?limit=2')).status, 200)
    const after = await scrape(server)
    const delta = (name: string, labels: Record<string, string> = {}): number => sampleValue(after, name, labels)! - (sampleValue(before, name, labels) ?? 0)
    assert.equal(delta('plantstore_store_operation_duration_seconds_count', { operation: 'create' }), 3)
    assert.equal(delta('plantstore_store_operation_duration_seconds_count', { operation: 'list' }), 1)
    assert.equal(delta('plantstore_store_group_commit_writes_sum'), 3, 'three writes committed')
    assert.ok(delta('plantstore_store_group_commit_writes_count') >= 1 && delta('plantstore_store_group_commit_writes_count') <= 3)
    assert.equal(sampleValue(after, 'plantstore_store_operations_in_flight', { operation: 'create' }), 0)
  })

  await t.test('requests refused before routing count by status and reason, and in no route\'s series', async () => {
    const before = await scrape(server)
    const auth = `Authorization: Bearer ${server.token}\r\n`
    const refusals: Array<[string, number, string]> = [
      [`GET /plants/${'1'.repeat(101)} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`, 414, 'pathTooLong'],
      [`GET /plants/%zz HTTP/1.1\r\nHost: x\r\n${auth}\r\n`, 400, 'badPath'],
      [`GET /plants/%zz HTTP/1.1\r\nHost: x\r\n${auth}\r\n`, 400, 'badPath'],
      [`POST /plants HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n${auth}Content-Type: application/json\r\nContent-Length: 21\r\n\r\n`, 417, 'expectationFailed'],
      [`GET /plants HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`, 431, 'headersTooLarge'],
      ['NOT HTTP AT ALL\r\n\r\n', 400, 'badRequest'],
      [`CONNECT /plants HTTP/1.1\r\nHost: x\r\n${auth}\r\n`, 400, 'connectNotServed']
    ]
    for (const [bytes, status] of refusals) assert.match((await rawExchange(server, bytes, { waitMs: 1000 })).text, new RegExp(`^HTTP/1.1 ${status} `))
    const after = await scrape(server)
    const refused = (samples: Sample[], status: number, reason: string): number =>
      sampleValue(samples, 'plantstore_http_refused_before_routing_total', { status: String(status), reason }) ?? 0
    for (const [status, reason, count] of [[414, 'pathTooLong', 1], [400, 'badPath', 2], [417, 'expectationFailed', 1], [431, 'headersTooLarge', 1], [400, 'badRequest', 1], [400, 'connectNotServed', 1]] as const) {
      assert.equal(refused(after, status, reason) - refused(before, status, reason), count, reason)
    }
    const routed = (samples: Sample[]): number => [...seriesOf(samples, 'plantstore_http_requests_total').values()].reduce((sum, value) => sum + value, 0)
    assert.equal(routed(after) - routed(before), 0, 'none counted as a routed request')
  })

  await t.test('1000 requests to random unknown paths, in any method, add no series: all count under route="unmatched"', async () => {
    const methods = ['GET', 'DELETE', 'PUT', 'PATCH', 'POST']
    for (const method of methods) assert.equal((await call(server, method, '/nowhere')).status, 404, method)
    const before = await scrape(server)
    const agent = new http.Agent({ keepAlive: true, maxSockets: 16 })
    t.after(() => agent.destroy())
    const statuses = await Promise.all(Array.from({ length: 1000 }, (_, i) => new Promise<number>((resolve, reject) => {
      const path = `/${Math.random().toString(36).slice(2)}/${i}?q=${i}`
      http.request(`${server.url}${path}`, { method: methods[i % methods.length], agent }, response => {
        response.resume().on('end', () => resolve(response.statusCode ?? 0))
      }).on('error', reject).end()
    })))
    assert.ok(statuses.every(status => status === 404))
    const after = await scrape(server)
    const keys = (samples: Sample[]): string[] => samples.filter(s => s.name.startsWith('plantstore_http_')).map(s => `${s.name}${JSON.stringify(s.labels)}`).sort()
    assert.deepEqual(keys(after), keys(before), 'the same series, no new ones')
    for (const method of methods) assert.equal(requests(after, method, 'unmatched', '404') - requests(before, method, 'unmatched', '404'), 200, method)
  })

  await t.test('a method a known path does not take (405) counts under route="unmatched", whichever it is', async () => {
    const before = await scrape(server)
    for (const [method, path] of [['POST', '/plants/changes'], ['PUT', '/plants/changes'], ['DELETE', '/plants/changes'], ['PATCH', '/plants/changes'], ['POST', '/plants/1']]) {
      assert.equal((await call(server, method, path)).status, 405, `${method} ${path}`)
    }
    const after = await scrape(server)
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      assert.equal(requests(after, method, 'unmatched', '405') - requests(before, method, 'unmatched', '405'), method === 'POST' ? 2 : 1, method)
      assert.equal(requests(after, method, '/plants/changes', '405'), 0, `${method}: no series of its own`)
    }
  })
})

test('the change log\'s metrics: changes written by type, the log\'s head and oldest kept position, readers by kind', async (t) => {
  const server = await startServer(t)
  await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })
  await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } }) // a retry logs nothing
  await call(server, 'PUT', '/plants/1', { body: { name: 'Moss' } })
  await call(server, 'DELETE', '/plants/1')
  const stream = await openStream(`${server.url}/plants/changes`, server.token)
  t.after(stream.close)
  const poll = call(server, 'GET', '/plants/changes?after=3&wait=3')
  await sleep(200)
  const samples = await scrape(server)
  for (const [type, count] of [['plant.created', 1], ['plant.updated', 1], ['plant.deleted', 1]] as const) {
    assert.equal(sampleValue(samples, 'plantstore_changes_written_total', { type }), count, type)
  }
  assert.equal(sampleValue(samples, 'plantstore_changes_position', { end: 'head' }), 3)
  assert.equal(sampleValue(samples, 'plantstore_changes_position', { end: 'oldest' }), 1)
  assert.equal(sampleValue(samples, 'plantstore_changes_readers', { kind: 'stream' }), 1)
  assert.equal(sampleValue(samples, 'plantstore_changes_readers', { kind: 'poll' }), 1)
  await call(server, 'POST', '/plants', { body: { id: 2, name: 'Ivy' } })
  assert.equal((await poll).status, 200)
  stream.close()
  await sleep(200)
  const after = await scrape(server)
  assert.equal(sampleValue(after, 'plantstore_changes_position', { end: 'head' }), 4)
  assert.equal(sampleValue(after, 'plantstore_changes_readers', { kind: 'stream' }), 0)
  assert.equal(sampleValue(after, 'plantstore_changes_readers', { kind: 'poll' }), 0)
})

test('while the store cannot write: requests and store calls in flight show, a 503 past the deadline counts as shed with its reason, and a client that leaves counts as 499', { timeout: 20_000 }, async (t) => {
  const server = await startServer(t)
  const { released } = await holdWriteLock(t, server.dbPath, 3500)
  const waiting = call(server, 'POST', '/plants', { body: { id: 1, name: 'waits' } })
  // A second client sends its POST, then leaves before the answer.
  const leaver = connect(Number(new URL(server.url).port), '127.0.0.1')
  const body = JSON.stringify({ id: 2, name: 'leaves' })
  leaver.write(`POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`)
  await sleep(400)
  let samples = await scrape(server)
  assert.equal(sampleValue(samples, 'plantstore_http_requests_in_flight'), 2)
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'create' }), 2)
  leaver.destroy()
  await sleep(200)
  samples = await scrape(server)
  assert.equal(sampleValue(samples, 'plantstore_http_requests_in_flight'), 1, 'the request whose client left is no longer in flight')
  assert.equal(requests(samples, 'POST', '/plants', '499'), 1)
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'create' }), 2, 'its write still waits in the store')

  const answer = await waiting
  assert.ok(isErrorBody(answer, 503))
  await sleep(100)
  samples = await scrape(server)
  assert.equal(requests(samples, 'POST', '/plants', '503'), 1)
  assert.equal(sampleValue(samples, 'plantstore_http_shed_requests_total', { reason: 'deadline' }), 2, 'both requests were shed, the one whose client had left too')
  assert.equal(sampleValue(samples, 'plantstore_store_errors_total', { operation: 'create', kind: 'deadline' }), 2, 'both writes failed in the store')
  assert.equal(sampleValue(samples, 'plantstore_http_requests_in_flight'), 0)
  assert.equal(sampleValue(samples, 'plantstore_store_operations_in_flight', { operation: 'create' }), 0)
  await released
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 3, name: 'after' } })).status, 200)
})

test('a client that half-closes once its request is sent is taken as gone: a read answered after the close counts as 499, and the answer is never written', async (t) => {
  const server = await startServer(t)
  // Tokens never used yet: each request looks its token up in the store, so its answer comes after the client's FIN is read.
  const tokens = ['a', 'b', 'c', 'd'].map(name => cli(server.dir, ['tokens', 'create', '--name', `half-${name}`]).stdout.trim())
  const paths = ['/plants', '/plants/1', '/plants/changes']
  for (const [i, path] of paths.entries()) {
    const answer = await rawExchange(server, `GET ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens[i]}\r\n\r\n`, { endWrite: true, waitMs: 1000 })
    assert.equal(answer.text, '', `${path}: no answer after the half-close`)
  }
  // A POST that waits for 100 Continue, sends its body, and half-closes while its write waits for a
  // lock another process holds: the 100 is no answer, and the 200 made after the close is not one either.
  const { released } = await holdWriteLock(t, server.dbPath, 1000)
  const body = '{"id": 1, "name": "Fern"}'
  const post = rawExchange(server, [`POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${tokens[3]}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`, body, ''], { gapMs: 200, endWrite: true, waitMs: 2500 })
  await released
  assert.equal((await post).text, 'HTTP/1.1 100 Continue\r\n\r\n', 'the 100, then no answer after the half-close')
  assert.equal((await call(server, 'GET', '/plants/1')).status, 200, 'the write was made all the same')
  await sleep(100)
  const samples = await scrape(server)
  assert.deepEqual([requests(samples, 'POST', '/plants', '200'), requests(samples, 'POST', '/plants', '499')], [0, 1], 'the POST counted as 499')
  for (const [route, status] of [['/plants', '200'], ['/plants/{id}', '404'], ['/plants/changes', '200']]) {
    assert.equal(requests(samples, 'GET', route, status), 0, `${route} not counted as answered ${status}`)
    assert.equal(requests(samples, 'GET', route, '499'), 1, `${route} counted as 499`)
  }
  const logged = server.stdout().trim().split('\n').map(line => JSON.parse(line) as { msg: string, route?: string, status?: number }).filter(line => line.msg === 'request' && line.route?.startsWith('/plants') === true)
  assert.deepEqual(logged.map(line => [line.route, line.status]), [['/plants', 499], ['/plants/{id}', 499], ['/plants/changes', 499], ['/plants', 499], ['/plants/{id}', 200]], 'logged as 499 too (and the read of what the POST wrote)')
})

test('too slow to arrive: a routed request (its body late) counts under its route as the 408 it was answered, not 499; one whose headers are late, as a refusal before routing', { timeout: 10_000 }, async (t) => {
  const server = await startServer(t, { env: { REQUEST_TIMEOUT: '1' } })
  const body = '{"id": 408, "name": "Slow"}'
  const head = `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`
  const answers = await Promise.all([
    rawExchange(server, head + body.slice(0, 10), { waitMs: 3000 }),
    rawExchange(server, head.slice(0, 30), { waitMs: 3000 })
  ])
  for (const answer of answers) assert.match(answer.text, /^HTTP\/1.1 408 /)
  // The routed request is recorded once its connection has gone: nothing more of it is read after
  // its answer, so the server's side lingers (up to 2 s) rather than seeing the client close.
  let samples = await scrape(server)
  for (const deadline = Date.now() + 3000; requests(samples, 'POST', '/plants', '408') === 0 && Date.now() < deadline; samples = await scrape(server)) await sleep(100)
  assert.equal(requests(samples, 'POST', '/plants', '408'), 1)
  assert.equal(requests(samples, 'POST', '/plants', '499'), 0)
  assert.equal(sampleValue(samples, 'plantstore_http_refused_before_routing_total', { status: '408', reason: 'requestTimeout' }), 1)
  assert.equal(sampleValue(samples, 'plantstore_http_requests_in_flight'), 0)
  // The log tells the two apart: the routed one as its body arrived (and its request line), the other before routing.
  const lines = server.stdout().trim().split('\n').map(line => JSON.parse(line) as { msg: string, status?: number, route?: string, reason?: string, reqId?: string })
  const refused = (msg: string): unknown[] => lines.filter(line => line.msg === msg).map(line => [line.status, line.reason, line.reqId !== undefined])
  assert.deepEqual(refused('request refused before routing'), [[408, 'requestTimeout', false]])
  assert.deepEqual(refused('request refused as its body arrived'), [[408, 'requestTimeout', true]])
  // The two lines of the routed request share its id.
  const routed = lines.find(line => line.msg === 'request refused as its body arrived')
  assert.deepEqual(lines.filter(line => line.msg === 'request' && line.status === 408).map(line => [line.route, line.reqId]), [['/plants', routed?.reqId]])
})
