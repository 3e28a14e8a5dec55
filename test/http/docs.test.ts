import assert from 'node:assert/strict'
import { request } from 'node:http'
import { test } from 'node:test'
import { gunzipSync } from 'node:zlib'
import { call, isErrorBody, startServer, type Server } from '../helpers.js'

/** The raw bytes of a GET, with the headers given: fetch would undo a gzip. */
async function rawGet (server: Server, path: string, headers: Record<string, string>, method = 'GET'): Promise<{ status: number, headers: Record<string, string | string[] | undefined>, bytes: Buffer }> {
  return await new Promise((resolve, reject) => {
    request(server.url + path, { headers, method }, response => {
      const chunks: Buffer[] = []
      response.on('data', (chunk: Buffer) => chunks.push(chunk))
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, bytes: Buffer.concat(chunks) }))
    }).on('error', reject).end()
  })
}

test('GET /docs serves the reference page and its files without a token', async (t) => {
  const server = await startServer(t)
  const page = await call(server, 'GET', '/docs', { token: null })
  assert.equal(page.status, 200)
  assert.equal(page.headers.get('content-type'), 'text/html; charset=utf-8')
  assert.equal(page.headers.get('cache-control'), 'no-cache')
  const csp = page.headers.get('content-security-policy') ?? ''
  assert.match(csp, /default-src 'none'/)
  assert.match(csp, /script-src 'self';/, 'scripts from this service only, none inline')
  assert.doesNotMatch(page.text, /<script>|<style|style=|https?:\/\//, 'no inline script or style, no absolute URL')

  const files = [...page.text.matchAll(/(?:src|href)="(docs\/[^"]+)"/g)].map(match => `/${match[1]}`)
  assert.deepEqual(files.map(file => file.replace(/\.[0-9a-f]{12}\./, '.')).sort(), ['/docs/start.js', '/docs/swagger-ui-bundle.js', '/docs/swagger-ui.css'])
  for (const file of files) {
    const plain = await rawGet(server, file, {})
    assert.equal(plain.status, 200, file)
    assert.equal(plain.headers['content-type'], file.endsWith('.css') ? 'text/css; charset=utf-8' : 'text/javascript; charset=utf-8', file)
    assert.equal(plain.headers['cache-control'], 'public, max-age=31536000, immutable', file)
    assert.equal(plain.headers['content-encoding'], undefined, `${file} is not compressed for a client that does not ask`)
    const zipped = await rawGet(server, file, { 'accept-encoding': 'gzip, deflate, br' })
    assert.equal(zipped.headers['content-encoding'], 'gzip', file)
    assert.equal(zipped.headers.vary, 'Accept-Encoding', file)
    assert.ok(gunzipSync(zipped.bytes).equals(plain.bytes), `${file} gzipped is the same file`)
    for (const taken of ['x-gzip', '*', 'br, *;q=0.5', 'GZIP;Q=0.1']) {
      assert.equal((await rawGet(server, file, { 'accept-encoding': taken })).headers['content-encoding'], 'gzip', `${file}: Accept-Encoding: ${taken} takes gzip`)
    }
    for (const refusal of ['gzip;q=0', 'gzip; q=0.000, *', '*;q=0', 'br, deflate', 'identity']) {
      const refused = await rawGet(server, file, { 'accept-encoding': refusal })
      assert.equal(refused.headers['content-encoding'], undefined, `${file}: Accept-Encoding: ${refusal} does not take gzip`)
      assert.ok(refused.bytes.equals(plain.bytes), `${file}: Accept-Encoding: ${refusal}, the file as it is`)
    }
  }
  assert.match((await call(server, 'GET', files.find(file => file.includes('start'))!, { token: null })).text, /url: 'openapi\.json'/, 'the page loads the served document')

  const head = await fetch(`${server.url}/docs`, { method: 'HEAD' })
  assert.equal(head.status, 200)
  assert.equal(head.headers.get('content-type'), 'text/html; charset=utf-8')
})

test('/docs answers like any route: 405 with Allow for another method, 404 for an unknown file', async (t) => {
  const server = await startServer(t)
  const file = /src="docs\/([^"]+)"/.exec((await call(server, 'GET', '/docs', { token: null })).text)![1]
  for (const [method, path] of [['POST', '/docs'], ['DELETE', '/docs'], ['PUT', `/docs/${file}`], ['POST', `/docs/${file}`]]) {
    const answer = await call(server, method, path, { token: null, body: {} })
    assert.ok(isErrorBody(answer, 405), `${method} ${path}: ${answer.status} ${answer.text}`)
    assert.equal(answer.headers.get('allow'), 'GET, HEAD', `${method} ${path}`)
  }
  for (const path of ['/docs/swagger-ui-bundle.js', '/docs/start.000000000000.js', '/docs/..%2fpackage.json']) {
    const answer = await call(server, 'GET', path, { token: null })
    assert.ok(isErrorBody(answer, 404), `${path}: ${answer.status} ${answer.text}`)
    assert.equal(answer.headers.get('cache-control'), null, `${path}: a 404 is not cached for good`)
  }
})

test('/docs/ (the page with a slash, where its relative links would not resolve) redirects to /docs', async (t) => {
  const server = await startServer(t)
  for (const method of ['GET', 'HEAD']) {
    const answer = await rawGet(server, '/docs/', {}, method)
    assert.equal(answer.status, 301, method)
    assert.equal(answer.headers.location, '../docs', `${method}: relative, so that a path prefix in front of the service keeps working`)
    assert.equal(new URL(String(answer.headers.location), `${server.url}/docs/`).pathname, '/docs')
  }
  const followed = await fetch(`${server.url}/docs/`)
  assert.equal(followed.status, 200)
  assert.match(await followed.text(), /swagger-ui/)
})

test('GET /openapi.json and the reference\'s files carry an ETag for each coding: If-None-Match naming it answers 304 with no body; the document is gzip-compressed for a client that takes it and revalidated before use', async (t) => {
  const server = await startServer(t)
  const file = `/${/src="(docs\/[^"]+)"/.exec((await call(server, 'GET', '/docs', { token: null })).text)![1]}`
  for (const [path, cacheControl] of [['/openapi.json', 'no-cache'], [file, 'public, max-age=31536000, immutable']]) {
    const plain = await rawGet(server, path, {})
    assert.equal(plain.status, 200, path)
    assert.equal(plain.headers['cache-control'], cacheControl, path)
    const etag = String(plain.headers.etag)
    assert.match(etag, /^W\/"[0-9a-f]{12}"$/, path)
    const zipped = await rawGet(server, path, { 'accept-encoding': 'gzip' })
    assert.equal(zipped.headers['content-encoding'], 'gzip', path)
    assert.equal(zipped.headers.vary, 'Accept-Encoding', path)
    assert.equal(zipped.headers.etag, `${etag.slice(0, -1)}-gzip"`, `${path}: the gzip has an ETag of its own`)
    assert.ok(gunzipSync(zipped.bytes).equals(plain.bytes), `${path}: gzipped, the same bytes`)
    for (const [coding, held] of [['identity', etag], ['gzip', String(zipped.headers.etag)]]) {
      for (const condition of [held, held.slice(2), `"0123456789ab", ${held}`, '*']) {
        for (const method of ['GET', 'HEAD']) {
          const answer = await rawGet(server, path, { 'if-none-match': condition, 'accept-encoding': coding }, method)
          const what = `${method} ${path}, ${coding}, If-None-Match: ${condition}`
          assert.equal(answer.status, 304, what)
          assert.equal(answer.headers.etag, held, `${what}: a 304 names the ETag`)
          assert.equal(answer.headers['cache-control'], cacheControl, `${what}: a 304 repeats the caching`)
          assert.equal(answer.headers.vary, 'Accept-Encoding', `${what}: and what the answer varies with`)
          for (const header of ['content-type', 'content-encoding', 'content-length']) assert.equal(answer.headers[header], undefined, `${what}: no ${header} on a 304`)
        }
      }
    }
    // A copy of the other coding is not the one this client takes: it gets the file.
    const other = await rawGet(server, path, { 'if-none-match': String(zipped.headers.etag) })
    assert.equal(other.status, 200, `${path}: the gzip's ETag, from a client that does not take gzip`)
    assert.ok(other.bytes.equals(plain.bytes))
    assert.equal((await rawGet(server, path, { 'if-none-match': etag, 'accept-encoding': 'gzip' })).status, 200, `${path}: the plain file's ETag, from a client that takes gzip`)
    assert.equal((await rawGet(server, path, { 'if-none-match': '"0123456789ab", W/"1"' })).status, 200, `${path}: other ETags`)
    const malformed = await call(server, 'GET', path, { token: null, headers: { 'if-none-match': etag.slice(3) } })
    assert.ok(isErrorBody(malformed, 400), `${path}, a malformed If-None-Match: ${malformed.status} ${malformed.text}`)
    for (const header of ['etag', 'cache-control']) assert.equal(malformed.headers.get(header), null, `${path}: a refusal has no ${header}`)
  }
  const document = await rawGet(server, '/openapi.json', {})
  assert.equal(document.headers['content-type'], 'application/json; charset=utf-8')
  assert.equal(JSON.parse(document.bytes.toString()).openapi, '3.1.0')
})
