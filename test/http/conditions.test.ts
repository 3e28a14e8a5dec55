// ETags and conditional requests over real HTTP (SPEC section 9), on both stores.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, isErrorBody, startServer, testStores, type Answer, type Server } from '../helpers.js'

const BIG = '9223372036854775807'

function etag (answer: Answer): string {
  const value = answer.headers.get('etag')
  assert.match(value ?? '', /^"[1-9]\d*"$/, `a strong ETag "N": ${String(value)}`)
  return value!
}

/** Asserts a 412 Error body, and that the plant is still `expected` (undefined: missing) with its ETag unchanged. */
async function refusedAndUnchanged (server: Server, answer: Answer, id: string, expected: { text?: string, etag?: string }): Promise<void> {
  assert.ok(isErrorBody(answer, 412), `${answer.status} ${answer.text}`)
  const now = await call(server, 'GET', `/plants/${id}`)
  if (expected.text === undefined) {
    assert.equal(now.status, 404)
  } else {
    assert.equal(now.status, 200)
    assert.equal(now.text, expected.text)
    assert.equal(now.headers.get('etag'), expected.etag)
  }
}

for (const store of testStores()) {
  describe(store, () => {
    test('ETags and conditions', async (t) => {
      const server = await startServer(t, { store })
      const raw = `{"id": ${BIG}, "name": "Fern", "tag": "shade"}`

      await t.test('POST, GET and PUT answer the plant\'s ETag; bodies are as before', async () => {
        const created = await call(server, 'POST', '/plants', { raw })
        assert.equal(created.status, 200)
        assert.deepEqual(created.body, { name: 'Fern', tag: 'shade' })
        const version = etag(created)
        const read = await call(server, 'GET', `/plants/${BIG}`)
        assert.equal(read.text, `{"id":${BIG},"name":"Fern","tag":"shade"}`)
        assert.equal(etag(read), version)
        const retried = await call(server, 'POST', '/plants', { raw })
        assert.equal(retried.status, 200)
        assert.equal(etag(retried), version, 'an identical retry changes nothing: same ETag')
        const replaced = await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Fern', tag: 'sun' } })
        assert.equal(replaced.status, 200)
        assert.notEqual(etag(replaced), version)
        assert.equal(etag(await call(server, 'GET', `/plants/${BIG}`)), etag(replaced))
        // A decision (in the document): every replace is a change, also one that sets the same data.
        const same = await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Fern', tag: 'sun' } })
        assert.equal(same.status, 200)
        assert.equal(BigInt(JSON.parse(etag(same))), BigInt(JSON.parse(etag(replaced))) + 1n, 'the same data again: the next position')
      })

      await t.test('If-None-Match on GET: 304 with the ETag and no body when it matches; 200 otherwise', async () => {
        const current = etag(await call(server, 'GET', `/plants/${BIG}`))
        for (const header of [current, `"1", ${current}`, `W/${current}`, '*']) {
          const answer = await call(server, 'GET', `/plants/${BIG}`, { headers: { 'if-none-match': header } })
          assert.equal(answer.status, 304, header)
          assert.equal(answer.text, '')
          assert.equal(answer.headers.get('etag'), current)
        }
        const stale = await call(server, 'GET', `/plants/${BIG}`, { headers: { 'if-none-match': '"1"' } })
        assert.equal(stale.status, 200)
        assert.equal(stale.body.name, 'Fern')
        assert.equal((await call(server, 'GET', '/plants/424242', { headers: { 'if-none-match': '*' } })).status, 404)
      })

      await t.test('HEAD: a 304 carries no Content-Length (it would misstate the 200\'s, RFC 9110 8.6); a 200 carries the GET\'s', async () => {
        const read = await call(server, 'GET', `/plants/${BIG}`)
        const head = await call(server, 'HEAD', `/plants/${BIG}`)
        assert.equal(head.status, 200)
        assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(read.text)))
        for (const method of ['HEAD', 'GET']) {
          const answer = await call(server, method, `/plants/${BIG}`, { headers: { 'if-none-match': etag(read) } })
          assert.equal(answer.status, 304, method)
          assert.equal(answer.headers.get('content-length'), null, method)
          assert.equal(answer.headers.get('etag'), etag(read), method)
        }
      })

      await t.test('If-Match on PUT and DELETE: a stale or weak ETag is 412 with the Error body, nothing changed', async () => {
        const before = await call(server, 'GET', `/plants/${BIG}`)
        const current = etag(before)
        const expected = { text: before.text, etag: current }
        for (const header of ['"1"', `W/${current}`, '"1", "99"', '"abc"']) {
          await refusedAndUnchanged(server, await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Changed' }, headers: { 'if-match': header } }), BIG, expected)
          await refusedAndUnchanged(server, await call(server, 'DELETE', `/plants/${BIG}`, { headers: { 'if-match': header } }), BIG, expected)
        }
        const replaced = await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Matched' }, headers: { 'if-match': `"1", ${current}` } })
        assert.equal(replaced.status, 200)
        assert.equal(replaced.text, `{"id":${BIG},"name":"Matched"}`)
        const any = await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Any' }, headers: { 'if-match': '*' } })
        assert.equal(any.status, 200)
      })

      await t.test('a missing plant is 404 whatever the conditions (RFC 9110 13.2.1: they are ignored where the answer without them is not 2xx), and nothing is created', async () => {
        for (const headers of [{ 'if-match': '*' }, { 'if-match': '"3"' }, { 'if-match': '"3", "4"' }, { 'if-none-match': '*' }, { 'if-none-match': '"3"' }, {}] as Array<Record<string, string>>) {
          for (const method of ['PUT', 'DELETE']) {
            const answer = await call(server, method, '/plants/77', { headers, ...(method === 'PUT' ? { body: { name: 'x' } } : {}) })
            assert.equal(answer.status, 404, `${method} ${JSON.stringify(headers)}`)
            assert.ok(isErrorBody(answer, 404))
          }
        }
        assert.equal((await call(server, 'GET', '/plants/77', { headers: { 'if-match': '*' } })).status, 404, 'as GET answers')
        assert.equal((await call(server, 'GET', '/plants/77')).status, 404, 'nothing created')
      })

      await t.test('If-None-Match on PUT and DELETE, If-Match on GET (RFC 9110 13.2.2): 412 with the Error body when they refuse, nothing changed', async () => {
        const created = await call(server, 'POST', '/plants', { body: { id: 99, name: 'Ivy' } })
        const first = etag(created)
        const expected = { text: '{"id":99,"name":"Ivy"}', etag: first }
        for (const header of ['*', first, `W/${first}`, `"1", ${first}`]) {
          await refusedAndUnchanged(server, await call(server, 'PUT', '/plants/99', { body: { name: 'Changed' }, headers: { 'if-none-match': header } }), '99', expected)
          await refusedAndUnchanged(server, await call(server, 'DELETE', '/plants/99', { headers: { 'if-none-match': header } }), '99', expected)
        }
        assert.ok(isErrorBody(await call(server, 'PUT', '/plants/99', { body: { name: 'Changed' }, headers: { 'if-none-match': 'nope' } }), 400), 'malformed: 400')
        assert.equal((await call(server, 'PUT', '/plants/98', { body: { name: 'x' }, headers: { 'if-none-match': '*' } })).status, 404, 'no plant: none matches, so 404 as without it')
        const replaced = await call(server, 'PUT', '/plants/99', { body: { name: 'Ivy', tag: 'wall' }, headers: { 'if-none-match': '"1"' } })
        assert.equal(replaced.status, 200)
        const second = etag(replaced)
        for (const header of ['"1"', `W/${second}`]) {
          const read = await call(server, 'GET', '/plants/99', { headers: { 'if-match': header } })
          assert.ok(isErrorBody(read, 412), `GET If-Match ${header}: ${read.status} ${read.text}`)
          assert.equal(read.headers.get('etag'), second, 'the 412 carries the current ETag')
        }
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/99', { headers: { 'if-match': '"1"', 'if-none-match': second } }), 412), 'If-Match is evaluated first')
        for (const header of [second, '*']) assert.equal((await call(server, 'GET', '/plants/99', { headers: { 'if-match': header } })).status, 200, header)
        assert.equal((await call(server, 'GET', '/plants/98', { headers: { 'if-match': '*' } })).status, 404)
        assert.equal((await call(server, 'DELETE', '/plants/99', { headers: { 'if-none-match': first } })).status, 204)
      })

      await t.test('If-None-Match: * on POST: 412 when the id exists, whatever the data; 200 when it does not', async () => {
        const before = await call(server, 'GET', `/plants/${BIG}`)
        for (const body of [`{"id": ${BIG}, "name": "Any"}`, `{"id": ${BIG}, "name": ${JSON.stringify(before.body.name)}}`]) {
          await refusedAndUnchanged(server, await call(server, 'POST', '/plants', { raw: body, headers: { 'if-none-match': '*' } }), BIG, { text: before.text, etag: etag(before) })
        }
        const fresh = await call(server, 'POST', '/plants', { body: { id: 88, name: 'New' }, headers: { 'if-none-match': '*' } })
        assert.equal(fresh.status, 200)
        etag(fresh)
        assert.ok(isErrorBody(await call(server, 'POST', '/plants', { body: { id: 88, name: 'Other' } }), 409), 'without the condition, other data is still 409')
      })

      await t.test('If-Match on POST names the plant of the body\'s id (RFC 9110 13.1.1, never ignored): 412 unless it exists at a named version, and it never creates; when it holds, the answer is a retry\'s', async () => {
        const stored = await call(server, 'POST', '/plants', { body: { id: 89, name: 'Matched', tag: 't' } })
        const tag = etag(stored)
        const position = async (): Promise<string | null> => (await call(server, 'GET', '/plants?limit=1')).headers.get('changes-position')
        const head = await position()
        for (const header of ['*', '"1", "2"', tag]) {
          await refusedAndUnchanged(server, await call(server, 'POST', '/plants', { body: { id: 90, name: 'Absent' }, headers: { 'if-match': header } }), '90', {})
        }
        for (const header of ['"1"', `W/${tag}`]) {
          await refusedAndUnchanged(server, await call(server, 'POST', '/plants', { body: { id: 89, name: 'Matched', tag: 't' }, headers: { 'if-match': header } }), '89', { text: '{"id":89,"name":"Matched","tag":"t"}', etag: tag })
        }
        for (const header of ['*', `"1", ${tag}`]) {
          const same = await call(server, 'POST', '/plants', { body: { id: 89, name: 'Matched', tag: 't' }, headers: { 'if-match': header } })
          assert.deepEqual([same.status, same.body, same.headers.get('etag')], [200, { name: 'Matched', tag: 't' }, tag], `${header}: the same data, a retry's 200 and ETag`)
          assert.ok(isErrorBody(await call(server, 'POST', '/plants', { body: { id: 89, name: 'Matched' }, headers: { 'if-match': header } }), 409), `${header}: other data (no tag), 409`)
        }
        await refusedAndUnchanged(server, await call(server, 'POST', '/plants', { body: { id: 89, name: 'Matched', tag: 't' }, headers: { 'if-match': tag, 'if-none-match': '*' } }), '89', { text: '{"id":89,"name":"Matched","tag":"t"}', etag: tag })
        assert.ok(isErrorBody(await call(server, 'POST', '/plants', { body: { id: 91, name: 'Malformed' }, headers: { 'if-match': 'nope' } }), 400), 'a malformed If-Match is 400')
        assert.equal((await call(server, 'GET', '/plants/91')).status, 404, 'and creates nothing')
        assert.equal(await position(), head, 'nothing was logged')
      })

      await t.test('a malformed condition is 400 with the Error body, never ignored', async () => {
        for (const header of ['12', '"12', 'W/12', ',', 'W/"1" x']) {
          const answer = await call(server, 'PUT', '/plants/88', { body: { name: 'Malformed' }, headers: { 'if-match': header } })
          assert.ok(isErrorBody(answer, 400), `${header}: ${answer.status} ${answer.text}`)
        }
        assert.equal((await call(server, 'GET', '/plants/88')).body.name, 'New')
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/88', { headers: { 'if-none-match': 'nope' } }), 400))
      })

      await t.test('two clients racing a replace with the same ETag: exactly one 200, the others 412', async () => {
        const version = etag(await call(server, 'GET', '/plants/88'))
        const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => call(server, 'PUT', '/plants/88', { body: { name: `racer ${i}` }, headers: { 'if-match': version } })))
        const statuses = answers.map(answer => answer.status).sort()
        assert.deepEqual(statuses, [200, 412, 412, 412, 412, 412])
        const winner = answers.find(answer => answer.status === 200)!
        const now = await call(server, 'GET', '/plants/88')
        assert.equal(now.body.name, winner.body.name)
        assert.equal(etag(now), etag(winner))
      })

      await t.test('a plant deleted and created again has a new ETag, never an earlier one', async () => {
        const first = etag(await call(server, 'GET', '/plants/88'))
        assert.equal((await call(server, 'DELETE', '/plants/88', { headers: { 'if-match': first } })).status, 204)
        const again = await call(server, 'POST', '/plants', { body: { id: 88, name: 'New' } })
        assert.equal(again.status, 200)
        assert.ok(BigInt(JSON.parse(etag(again))) > BigInt(JSON.parse(first)), `${etag(again)} after ${first}`)
        await refusedAndUnchanged(server, await call(server, 'PUT', '/plants/88', { body: { name: 'x' }, headers: { 'if-match': first } }), '88', { text: '{"id":88,"name":"New"}', etag: etag(again) })
      })
    })
  })
}
