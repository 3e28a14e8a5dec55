import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, cli, holdWriteLock, isErrorBody, startServer, type Answer, type Server } from '../helpers.js'
import { isRawErrorBody, rawExchange, rawHeaders } from '../raw.js'
import { openStream } from '../sse.js'

const ALLOWED = ['http://garden.example:3000', 'https://shop.example']
/** Look-alikes of the allowed ones (another port, no port, a longer host, another scheme) and an unrelated origin. */
const REFUSED = ['http://garden.example:30001', 'http://garden.example', 'http://evil-garden.example', 'http://shop.example', 'https://other.example']
const CORS_ORIGINS = ALLOWED.join(', ')

/** Asserts the CORS headers `answer` must carry for a request from `origin`: all of them if it is listed, else none, and Vary: Origin either way. */
function assertCors (answer: Answer, origin: string, what: string): void {
  const cors = [...answer.headers.keys()].filter(name => name.startsWith('access-control-'))
  assert.match(answer.headers.get('vary') ?? '', /\bOrigin\b/i, `${what} from ${origin}: Vary: Origin`)
  if (ALLOWED.includes(origin)) {
    assert.equal(answer.headers.get('access-control-allow-origin'), origin, `${what} from ${origin}`)
    assert.equal(answer.headers.get('access-control-expose-headers'), 'Allow, Changes-Position, ETag, Link, Retry-After, WWW-Authenticate', `${what} from ${origin}`)
  } else {
    assert.deepEqual(cors, [], `${what} from ${origin}: no CORS header`)
  }
}

function preflight (server: Server, path: string, origin: string, method: string): Promise<Answer> {
  return call(server, 'OPTIONS', path, { token: null, headers: { origin, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' } })
}

test('with CORS_ORIGINS, the listed origins get CORS headers on every answer and their preflights are answered; look-alikes and others get none', async (t) => {
  const server = await startServer(t, { env: { CORS_ORIGINS } })
  const reader = cli(server.dir, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read']).stdout.trim()
  let nextId = 1

  await t.test('a preflight from a listed origin is 204 with the path\'s methods; from any other, the 405 any OPTIONS gets, without CORS headers', async () => {
    for (const origin of [...ALLOWED, ...REFUSED]) {
      for (const [path, method, methods] of [['/plants', 'POST', 'GET, HEAD, POST'], ['/plants/1', 'PUT', 'GET, HEAD, PUT, DELETE'], ['/metrics', 'GET', 'GET, HEAD']]) {
        const answer = await preflight(server, path, origin, method)
        assertCors(answer, origin, `preflight of ${path}`)
        if (ALLOWED.includes(origin)) {
          assert.equal(answer.status, 204)
          assert.equal(answer.text, '')
          assert.equal(answer.headers.get('access-control-allow-methods'), methods)
          assert.equal(answer.headers.get('access-control-allow-headers'), 'Authorization, Content-Type, If-Match, If-None-Match, Last-Event-ID')
          assert.equal(answer.headers.get('access-control-max-age'), '600')
        } else {
          assert.ok(isErrorBody(answer, 405), `${origin} ${path}: ${answer.status}`)
          assert.equal(answer.headers.get('allow'), methods)
        }
      }
    }
  })

  await t.test('a preflight on an unknown path is the 404 of any request there, with CORS headers for a listed origin', async () => {
    for (const origin of [...ALLOWED, ...REFUSED]) {
      const answer = await preflight(server, '/nowhere', origin, 'GET')
      assert.ok(isErrorBody(answer, 404))
      assertCors(answer, origin, 'preflight of an unknown path')
    }
  })

  await t.test('200, 401, 403, 404, 405, 415 and a path refused before routing (400) all carry the headers for a listed origin, and only for it', async () => {
    for (const origin of [...ALLOWED, ...REFUSED]) {
      const headers = { origin }
      const id = nextId++
      const created = await call(server, 'POST', '/plants', { body: { id, name: 'Fern' }, headers })
      assert.equal(created.status, 200)
      assertCors(created, origin, 'POST 200')
      const read = await call(server, 'GET', `/plants/${id}`, { headers })
      assert.equal(read.status, 200)
      assertCors(read, origin, 'GET 200')
      const feed = await call(server, 'GET', '/plants/changes?limit=1', { headers })
      assert.equal(feed.status, 200)
      assertCors(feed, origin, 'the feed')
      assert.equal(feed.headers.get('vary'), 'Origin, Accept', 'the feed varies by Accept too, after Origin')
      const answers: Array<[Answer, number, string]> = [
        [await call(server, 'GET', `/plants/${id}`, { token: null, headers }), 401, 'no token'],
        [await call(server, 'POST', '/plants', { token: reader, body: { id: 1000 + id, name: 'Moss' }, headers }), 403, 'a token without plants:write'],
        [await call(server, 'GET', '/plants/999999', { headers }), 404, 'an unknown plant'],
        [await call(server, 'GET', '/no/such/route', { headers }), 404, 'an unknown route'],
        [await call(server, 'PATCH', `/plants/${id}`, { body: {}, headers }), 405, 'a method the path does not take'],
        [await call(server, 'POST', '/plants', { raw: 'id=1', headers: { ...headers, 'content-type': 'text/plain' } }), 415, 'a body not JSON'],
        [await call(server, 'GET', '/plants/%zz', { headers }), 400, 'bad percent-encoding in the path']
      ]
      for (const [answer, status, what] of answers) {
        assert.ok(isErrorBody(answer, status), `${what}: ${answer.status}`)
        assertCors(answer, origin, what)
      }
      assert.equal(answers[0][0].headers.get('www-authenticate'), 'Bearer')
    }
  })

  await t.test('the answers that need no token carry them too: the document, the metrics, the docs page and its files (which vary by Accept-Encoding as well)', async () => {
    for (const origin of [ALLOWED[0], REFUSED[0]]) {
      const headers = { origin }
      const page = await call(server, 'GET', '/docs', { token: null, headers })
      const file = /href="(docs\/swagger-ui\.[0-9a-f]+\.css)"/.exec(page.text)?.[1]
      assert.ok(file !== undefined, 'the page names its stylesheet')
      for (const [path, what] of [['/openapi.json', 'the document'], ['/metrics', 'the metrics'], ['/docs', 'the docs page'], [`/${file}`, 'a file of the docs page']]) {
        const answer = await call(server, 'GET', path, { token: null, headers })
        assert.equal(answer.status, 200, what)
        assertCors(answer, origin, what)
      }
      for (const path of ['/openapi.json', `/${file}`]) {
        const answer = await call(server, 'GET', path, { token: null, headers })
        assert.equal(answer.headers.get('vary'), 'Origin, Accept-Encoding', `${path} varies by Accept-Encoding too, after Origin`)
      }
    }
  })

  await t.test('503 while the store cannot write, with Retry-After, carries them too', { timeout: 15_000 }, async () => {
    await holdWriteLock(t, server.dbPath, 3000)
    const origins = [...ALLOWED, ...REFUSED]
    const answers = await Promise.all(origins.map(origin => call(server, 'POST', '/plants', { body: { id: nextId++, name: 'Ivy' }, headers: { origin } })))
    answers.forEach((answer, i) => {
      assert.ok(isErrorBody(answer, 503), `${origins[i]}: ${answer.status}`)
      assert.equal(answer.headers.get('retry-after'), '1')
      assertCors(answer, origins[i], '503')
    })
  })
})

test('the answers written outside Fastify, to a request whose head was read, carry the CORS headers of its Origin: a body too slow (408) or malformed (400), an Expect refused (417), a body declared too large before it is sent (413), a CONNECT; one whose head could not be read, Vary alone', async (t) => {
  const server = await startServer(t, { env: { CORS_ORIGINS, REQUEST_TIMEOUT: '1' } })
  const head = (origin: string, lines: string): string => `POST /plants HTTP/1.1\r\nHost: x\r\nOrigin: ${origin}\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\n${lines}\r\n`
  const cases = [...ALLOWED, ...REFUSED].flatMap((origin): Array<[string, string, number, string]> => [
    [origin, 'a body that stops arriving', 408, head(origin, 'Content-Length: 50\r\n') + '{"id":'],
    [origin, 'a malformed chunked body', 400, head(origin, 'Transfer-Encoding: chunked\r\n') + 'zz\r\n'],
    [origin, 'an Expect other than 100-continue', 417, head(origin, 'Expect: foo\r\nContent-Length: 2\r\n')],
    [origin, '100-continue for a body over the limit', 413, head(origin, 'Expect: 100-continue\r\nContent-Length: 70000\r\n')],
    [origin, 'a CONNECT', 400, `CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\nOrigin: ${origin}\r\n\r\n`]
  ])
  // At once, each on its connection: the 408s wait out REQUEST_TIMEOUT together.
  const answers = await Promise.all(cases.map(async ([, , , bytes]) => await rawExchange(server, bytes, { waitMs: 3000 })))
  cases.forEach(([origin, what, status], i) => {
    assert.ok(isRawErrorBody(answers[i].text, status), `${what}: ${answers[i].text}`)
    assertCors({ status, headers: rawHeaders(answers[i].text), text: '', body: undefined }, origin, what)
  })
  // A head that cannot be read names no origin the answer could trust: Vary alone.
  const unread = await rawExchange(server, head(ALLOWED[0], 'Content-Length: 2\r\nContent-Length: 2\r\n') + '{}')
  assert.ok(isRawErrorBody(unread.text, 400), unread.text)
  assert.equal(rawHeaders(unread.text).get('vary'), 'Origin')
  assert.deepEqual([...rawHeaders(unread.text).keys()].filter(name => name.startsWith('access-control-')), [])
  assert.equal((await call(server, 'GET', '/plants')).text, '[]', 'nothing was stored')
})

test('the change feed carries the CORS headers for a listed origin, and only for it: JSON, a 410, and a stream', async (t) => {
  const server = await startServer(t, { env: { CORS_ORIGINS } })
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
  for (const origin of [...ALLOWED, ...REFUSED]) {
    const headers = { origin }
    const page = await call(server, 'GET', '/plants/changes', { headers })
    assert.equal(page.status, 200)
    assertCors(page, origin, 'the feed')
    const gone = await call(server, 'GET', '/plants/changes?after=9', { headers })
    assert.ok(isErrorBody(gone, 410))
    assertCors(gone, origin, 'the feed\'s 410')
    const stream = await openStream(`${server.url}/plants/changes`, server.token, headers)
    stream.close()
    assert.equal(stream.status, 200)
    assertCors({ status: 200, headers: new Headers(stream.headers as Record<string, string>), text: '', body: undefined }, origin, 'a stream')
  }
})

test('429 from the rate limit carries the CORS headers for a listed origin, and only for it', async (t) => {
  const server = await startServer(t, { env: { CORS_ORIGINS, RATE_LIMIT_PER_MINUTE: '1' } })
  assert.equal((await call(server, 'GET', '/plants')).status, 200)
  for (const origin of [...ALLOWED, ...REFUSED]) {
    const answer = await call(server, 'GET', '/plants', { headers: { origin } })
    assert.ok(isErrorBody(answer, 429))
    assert.ok(Number(answer.headers.get('retry-after')) >= 1)
    assertCors(answer, origin, '429')
  }
})

test('without CORS_ORIGINS, CORS is off: no Access-Control-* header and no Vary on any answer, and a preflight is the 405 of any OPTIONS', async (t) => {
  const server = await startServer(t)
  const origin = ALLOWED[0]
  const answers: Array<[Answer, number]> = [
    [await preflight(server, '/plants', origin, 'POST'), 405],
    [await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' }, headers: { origin } }), 200],
    [await call(server, 'GET', '/plants/1', { token: null, headers: { origin } }), 401],
    [await call(server, 'GET', '/nowhere', { headers: { origin } }), 404]
  ]
  for (const [answer, status] of answers) {
    assert.equal(answer.status, status)
    assert.deepEqual([...answer.headers.keys()].filter(name => name.startsWith('access-control-') || name === 'vary'), [], `${status}`)
  }
  assert.equal(answers[0][0].headers.get('allow'), 'GET, HEAD, POST')
})
