import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { call, isErrorBody, startServer, testStores } from '../helpers.js'
import { isRawErrorBody, parseRaw, rawExchange } from '../raw.js'

for (const store of testStores()) {
  describe(store, () => {
    test('errors outside the happy path all carry the Error body', async (t) => {
      const server = await startServer(t, { store })

      await t.test('413 for a body over 64 KiB, and nothing is stored', async () => {
        const answer = await call(server, 'POST', '/plants', { body: { id: 1, name: 'x', pad: 'p'.repeat(65 * 1024) } })
        assert.ok(isErrorBody(answer, 413), answer.text)
        assert.equal((await call(server, 'GET', '/plants/1')).status, 404)
      })

      await t.test('415 for a content type other than JSON', async () => {
        for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
          const answer = await call(server, 'POST', '/plants', { raw: '{"id": 1, "name": "x"}', headers: { 'content-type': type } })
          assert.ok(isErrorBody(answer, 415), `${type}: ${answer.status} ${answer.text}`)
        }
        // No Content-Type at all (a body of bytes: fetch then names no type of its own).
        const untyped = await fetch(`${server.url}/plants`, { method: 'POST', headers: { authorization: `Bearer ${server.token}` }, body: Buffer.from('{"id": 1, "name": "x"}') })
        const text = await untyped.text()
        assert.ok(isErrorBody({ status: untyped.status, headers: untyped.headers, text, body: JSON.parse(text) }, 415), `no Content-Type: ${untyped.status} ${text}`)
        assert.equal((await call(server, 'GET', '/plants/1')).status, 404, 'nothing stored')
        const charset = await call(server, 'POST', '/plants', { raw: '{"id": 2, "name": "x"}', headers: { 'content-type': 'application/json; charset=utf-8' } })
        assert.equal(charset.status, 200)
      })

      await t.test('404 for an unknown route, with or without a token', async () => {
        for (const token of [undefined, null]) {
          assert.ok(isErrorBody(await call(server, 'GET', '/nothing-here', { token }), 404))
          assert.ok(isErrorBody(await call(server, 'POST', '/plants/1/leaves', { token, body: {} }), 404))
        }
      })

      await t.test('405 with Allow for a known path and an unknown method', async () => {
        const answer = await call(server, 'PATCH', '/plants', { body: {} })
        assert.ok(isErrorBody(answer, 405))
        assert.equal(answer.headers.get('allow'), 'GET, HEAD, POST')
        const one = await call(server, 'POST', '/plants/1', { body: {} })
        assert.ok(isErrorBody(one, 405))
        assert.equal(one.headers.get('allow'), 'GET, HEAD, PUT, DELETE')
        // An empty id is routed as an id (400 for a method that has a route), so the others are 405 there too.
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/'), 400))
        const empty = await call(server, 'POST', '/plants/', { body: {} })
        assert.ok(isErrorBody(empty, 405), empty.text)
        assert.equal(empty.headers.get('allow'), 'GET, HEAD, PUT, DELETE')
        const rotate = await call(server, 'GET', '/webhooks//rotate-secret')
        assert.ok(isErrorBody(rotate, 405), rotate.text)
        assert.equal(rotate.headers.get('allow'), 'POST')
      })

      await t.test('a path or method no route takes is answered before its body is read, token or not: a body that is not JSON changes nothing', async () => {
        for (const token of [undefined, null]) {
          for (const [method, path, status, allow] of [['POST', '/nothing-here', 404, null], ['PATCH', '/plants/1', 405, 'GET, HEAD, PUT, DELETE'],
            ['POST', '/healthz', 405, 'GET, HEAD'], ['PUT', '/plants/changes', 405, 'GET, HEAD'], ['DELETE', '/plants/changes', 405, 'GET, HEAD']] as const) {
            const answer = await call(server, method, path, { token, raw: '{"a": [1e308, not JSON', headers: { 'content-type': 'application/json' } })
            assert.ok(isErrorBody(answer, status), `${method} ${path}: ${answer.text}`)
            assert.equal(answer.headers.get('allow'), allow, `${method} ${path}`)
          }
        }
      })

      await t.test('a refusal before the body is read closes the connection after it: one answer, whatever the body then does', async () => {
        const chunked = 'POST /nothing-here HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n'
        const broken = await rawExchange(server, [chunked, 'zz\r\nbad\r\n'], { waitMs: 2000, gapMs: 300 })
        assert.deepEqual([...broken.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(match => Number(match[1])), [404], broken.text)
        assert.match(broken.text, /connection: close/i)
        const huge = await rawExchange(server, 'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n{"id": 1', { waitMs: 2000 })
        assert.ok(isRawErrorBody(huge.text, 401), huge.text)
        assert.ok(huge.closed, 'closed at once, not drained for REQUEST_TIMEOUT')
        // Past 64 bits the parser refuses the digits themselves: still a body too large, not a malformed length.
        const beyond = await rawExchange(server, `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: 100000000000000000000\r\n\r\n`, { waitMs: 2000 })
        assert.ok(isRawErrorBody(beyond.text, 413), beyond.text)
        assert.ok(beyond.closed)
      })

      await t.test('a body read whole and refused (not JSON, another charset, another type) keeps the connection: pipelined requests after it are answered', async () => {
        const auth = `Authorization: Bearer ${server.token}\r\n`
        const post = (type: string, body: string): string => `POST /plants HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: ${type}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
        const answer = await rawExchange(server, post('application/json', '{bad}') + post('application/json; charset=latin1', '{"id": 81, "name": "x"}') +
          post('text/plain', 'hello') + post('application/json', '{"id": 82, "name": "Kept alive"}'), { waitMs: 1500 })
        assert.deepEqual([...answer.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(match => Number(match[1])), [400, 415, 415, 200], answer.text)
        assert.doesNotMatch(answer.text, /connection: close/i)
        assert.equal((await call(server, 'GET', '/plants/82')).status, 200)
      })

      await t.test('pipelined: a malformed request after good ones is answered after theirs, in order; theirs are not lost', async () => {
        const body = '{"id": 79, "name": "Piped"}'
        const post = `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`
        const answer = await rawExchange(server, post + 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' + 'GET /healthz HTTP/1.1\r\nHost: x\r\nX: a\u0001b\r\n\r\n', { waitMs: 3000 })
        assert.deepEqual([...answer.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(match => Number(match[1])), [200, 200, 400], answer.text)
        assert.match(answer.text, /\{"name":"Piped"\}/)
        assert.ok(answer.closed, 'closed after the 400')
        assert.equal((await call(server, 'GET', '/plants/79')).status, 200)
        await sleep(100)
        const lines = server.stdout().trim().split('\n').map(line => JSON.parse(line) as { msg: string, status?: number, route?: string, method?: string })
        assert.ok(lines.some(line => line.msg === 'request' && line.method === 'POST' && line.route === '/plants' && line.status === 200), 'the POST is logged with its 200')
        assert.ok(!lines.some(line => line.status === 499), 'no request is taken for one whose client left')
      })

      await t.test('pipelined: each request runs after the one before it is answered, so it sees that one\'s change (RFC 9112 9.3.2)', async () => {
        const auth = `Authorization: Bearer ${server.token}\r\n`
        const body = (name: string): string => `{"id": 80, "name": "${name}"}`
        const write = (method: string, path: string, data?: string): string => `${method} ${path} HTTP/1.1\r\nHost: x\r\n${auth}` +
          (data === undefined ? '\r\n' : `Content-Type: application/json\r\nContent-Length: ${data.length}\r\n\r\n${data}`)
        const bytes = write('POST', '/plants', body('First')) + write('GET', '/plants/80') + write('PUT', '/plants/80', body('Second')) +
          write('GET', '/plants/80') + write('DELETE', '/plants/80') + write('GET', '/plants/80') + write('DELETE', '/plants/80')
        const answer = await rawExchange(server, bytes, { waitMs: 3000 })
        assert.deepEqual([...answer.text.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map(match => Number(match[1])), [200, 200, 200, 200, 204, 404, 404], answer.text)
        assert.deepEqual([...answer.text.matchAll(/"name":"(\w+)"/g)].map(match => match[1]), ['First', 'First', 'Second', 'Second'])
        assert.equal((await call(server, 'GET', '/plants/80')).status, 404, 'the DELETE ran after the POST: the plant is gone')
      })

      await t.test('malformed HTTP is answered 400 with the Error body', async () => {
        for (const bytes of ['NOT HTTP AT ALL\r\n\r\n', 'GET /plants HTTP/1.1\r\nHost: x\r\nBad Header Without Colon\r\n\r\n', 'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n']) {
          const answer = parseRaw((await rawExchange(server, bytes)).text)
          assert.equal(answer.status, 400, bytes)
          assert.match(answer.headers, /content-type: application\/json/)
          assert.deepEqual(Object.keys(answer.body).sort(), ['error', 'message'])
          assert.equal(answer.body.error, 400)
        }
      })

      await t.test('oversized headers are answered 431 with the Error body', async () => {
        const answer = parseRaw((await rawExchange(server, `GET /plants HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`)).text)
        assert.equal(answer.status, 431)
        assert.equal(answer.body.error, 431)
      })

      await t.test('a body cut short is answered 400 with the Error body, and nothing is stored', async () => {
        const body = '{"id": 3, "name": "cut"}'
        const raw = await rawExchange(server, `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length + 20}\r\n\r\n${body}`, { endWrite: true })
        const answer = parseRaw(raw.text)
        assert.equal(answer.status, 400)
        assert.deepEqual(Object.keys(answer.body).sort(), ['error', 'message'])
        assert.equal(answer.body.message, 'The request ended before it had arrived whole: the client closed its side of the connection first.')
        assert.equal((await call(server, 'GET', '/plants/3')).status, 404)
      })

      await t.test('malformed framing is answered 400 with a sentence that says what is wrong, not only that it is', async () => {
        const post = `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n`
        const cases: Array<[string, string, RegExp]> = [
          ['a chunk size that is not hexadecimal', `${post}Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`, /^The request's chunked body is malformed/],
          ['Content-Length with Transfer-Encoding', `${post}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`, /^The request has both Content-Length and Transfer-Encoding/],
          ['Transfer-Encoding with Content-Length', `${post}Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n0\r\n\r\n`, /^The request has both Content-Length and Transfer-Encoding/],
          ['Content-Length twice', `${post}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{} `, /^The Content-Length header was sent more than once/],
          ['Content-Length not a number', `${post}Content-Length: 2x\r\n\r\n{}`, /^The Content-Length header must be a number of bytes/],
          ['a header line without a colon', 'GET /plants HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n', /^A header line is not valid/],
          ['no method', 'NOT HTTP AT ALL\r\n\r\n', /^The request line must start with a method that HTTP defines/],
          ['a method HTTP does not define', 'FOO /plants HTTP/1.1\r\nHost: x\r\n\r\n', /^The request line must start with a method that HTTP defines/],
          ['a space in the query', 'GET /plants?limit= 1 HTTP/1.1\r\nHost: x\r\n\r\n', /^The request line must be a method, a target and the version/],
          ['a target that is no path', 'GET plants HTTP/1.1\r\nHost: x\r\n\r\n', /^The request target must be a path/],
          ['a byte outside ASCII in the query', 'GET /plants?tag=\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n', /^The request target must be a path/],
          ['a version that is no version', 'GET / HTTP/1.x\r\nHost: x\r\n\r\n', /^The request line must be a method, a target and the version/],
          ['a request line ended by LF alone', 'GET / HTTP/1.1\nHost: x\r\n\r\n', /^The request line must be a method, a target and the version HTTP\/1\.1 \(or HTTP\/1\.0\), separated by single spaces and ended by CR LF\.$/],
          ['a chunk size line ended by LF alone', `${post}Transfer-Encoding: chunked\r\n\r\n3\nabc\r\n0\r\n\r\n`, /^The request's chunked body is malformed/],
          ['chunk data not ended by CR LF', `${post}Transfer-Encoding: chunked\r\n\r\n3\r\n{"aXY`, /^The request's chunked body is malformed/],
          ['chunk extensions over the parser\'s 16 KiB', `${post}Transfer-Encoding: chunked\r\n\r\n3;x=${'e'.repeat(17_000)}\r\nabc\r\n0\r\n\r\n`, /^The request's chunk extensions are too long/],
          ['a lone CR in a header value', 'GET / HTTP/1.1\r\nHost: x\r\nA: b\rc\r\n\r\n', /^Each line of the request's head must end with CR LF/]
        ]
        for (const [what, bytes, message] of cases) {
          const answer = parseRaw((await rawExchange(server, bytes)).text)
          assert.equal(answer.status, 400, what)
          assert.match(answer.body?.message ?? '', message, what)
        }
      })

      await t.test('a head that fails to parse is answered with a Date, and without the body when it is a HEAD\'s (RFC 9110 9.3.2, 6.6.1)', async () => {
        const heads: Array<[string, number]> = [
          ['/plants/1 HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n', 400],
          ['/plants/1 HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n', 400],
          ['/plants/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n', 400],
          [`/plants/1 HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431]
        ]
        for (const [rest, status] of heads) {
          for (const method of ['HEAD', 'GET']) {
            const { text } = await rawExchange(server, `${method} ${rest}`)
            const [head, body] = text.split('\r\n\r\n')
            assert.match(head, new RegExp(`^HTTP/1\\.1 ${status} `), `${method} ${rest.slice(0, 60)}`)
            assert.match(head, /\r\ndate: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n/i, head)
            const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1])
            if (method === 'HEAD') assert.equal(body, '', `no body after a HEAD's head: ${text}`)
            else assert.equal(Buffer.byteLength(body), length, 'the Error body, as long as said')
          }
        }
      })

      await t.test('the server is still up and answering after all that', async () => {
        assert.equal((await call(server, 'GET', '/healthz', { token: null })).status, 200)
      })
    })
  })
}
