import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, cli, isErrorBody, startServer, testStores, type Server } from '../helpers.js'

async function seed (server: Server, plants: Array<{ id: number | string, name: string, tag?: string }>): Promise<void> {
  for (const plant of plants) {
    const raw = `{"id": ${plant.id}, "name": ${JSON.stringify(plant.name)}${plant.tag === undefined ? '' : `, "tag": ${JSON.stringify(plant.tag)}`}}`
    assert.equal((await call(server, 'POST', '/plants', { raw })).status, 200)
  }
}

/** Follows `Link: <…>; rel="next"` from `path` to the end; returns every page. */
async function walk (server: Server, path: string): Promise<any[][]> {
  const pages = []
  let next: string | undefined = path
  while (next !== undefined) {
    const answer = await call(server, 'GET', next)
    assert.equal(answer.status, 200, answer.text)
    pages.push(answer.body)
    next = /^<([^>]+)>; rel="next"$/.exec(answer.headers.get('link') ?? '')?.[1]
  }
  return pages
}

/** A request that makes each operation answer a given failure; the status is the key. */
function provoke (method: string, path: string, status: string, tokens: { all: string, adminOnly: string, plantsOnly: string }): { path: string, token: string | null, body?: unknown } | undefined {
  const writes = method === 'post' || method === 'put'
  const webhooks = path.startsWith('/webhooks')
  const validBody = !writes ? undefined : webhooks ? (path.endsWith('/replay') ? { after: 0 } : { url: 'https://example.com/' }) : method === 'post' ? { id: 424242, name: 'Probe' } : method === 'put' ? { name: 'Probe' } : undefined
  const onePlant = (id: string): string => path.replace(/\{\w+\}/g, id)
  switch (status) {
    case '400': return /\{\w+\}/.test(path) ? { path: onePlant('one'), token: tokens.all, body: validBody } : { path: method === 'get' ? `${path}?limit=0` : path, token: tokens.all, body: writes ? {} : undefined }
    case '401': return { path: onePlant('1'), token: null, body: validBody }
    case '403': return { path: onePlant('1'), token: webhooks ? tokens.plantsOnly : tokens.adminOnly, body: validBody }
    case '404': return { path: onePlant('424242'), token: tokens.all, body: validBody }
    case '414': return { path: onePlant('1'.repeat(101)), token: tokens.all, body: validBody }
    default: return undefined
  }
}

for (const store of testStores()) {
  describe(store, () => {
    test('GET /plants', async (t) => {
      const server = await startServer(t, { store })
      const plants = Array.from({ length: 250 }, (_, i) => ({ id: (i * 7919) % 1000 - 500, name: `p${i}`, ...(i % 3 === 0 ? { tag: 'fern' } : {}) }))
      await seed(server, plants)
      const byId = [...plants].sort((a, b) => a.id - b.id).map(p => ({ ...p }))

      await t.test('is empty-safe, ordered by id, 100 by default, with a Link while more remain', async () => {
        const answer = await call(server, 'GET', '/plants')
        assert.equal(answer.status, 200)
        assert.deepEqual(answer.body, byId.slice(0, 100))
        assert.equal(answer.headers.get('link'), `</plants?after=${byId[99].id}>; rel="next"`)
      })

      await t.test('following Link returns every plant exactly once, in order', async () => {
        const pages = await walk(server, '/plants?limit=7')
        assert.deepEqual(pages.flat(), byId)
        assert.ok(pages.slice(0, -1).every(page => page.length === 7))
      })

      await t.test('the last page has no Link; a page that ends exactly at the end has none either', async () => {
        const last = await call(server, 'GET', `/plants?after=${byId[240].id}`)
        assert.equal(last.body.length, 9)
        assert.equal(last.headers.get('link'), null)
        const exact = await call(server, 'GET', `/plants?limit=10&after=${byId[239].id}`)
        assert.equal(exact.body.length, 10)
        assert.equal(exact.headers.get('link'), null)
      })

      await t.test('limit 1 and 1000 are the bounds', async () => {
        assert.equal((await call(server, 'GET', '/plants?limit=1')).body.length, 1)
        assert.equal((await call(server, 'GET', '/plants?limit=1000')).body.length, 250)
      })

      await t.test('tag filters by exact tag, and pages keep the filter', async () => {
        const ferns = byId.filter(p => p.tag === 'fern')
        assert.deepEqual((await walk(server, '/plants?tag=fern&limit=10')).flat(), ferns)
        assert.deepEqual((await call(server, 'GET', '/plants?tag=Fern')).body, [])
      })

      await t.test('after is exclusive and exact', async () => {
        const answer = await call(server, 'GET', `/plants?after=${byId[10].id}&limit=2`)
        assert.deepEqual(answer.body, byId.slice(11, 13))
      })

      await t.test('bad parameters are 400 with the Error body', async () => {
        for (const query of ['limit=0', 'limit=1001', 'limit=abc', 'limit=1.5', 'limit=-1', 'limit=', 'after=abc', 'after=1.5', 'after=9223372036854775808', `tag=${'t'.repeat(101)}`]) {
          const answer = await call(server, 'GET', `/plants?${query}`)
          assert.ok(isErrorBody(answer, 400), `${query}: ${answer.status} ${answer.text}`)
        }
      })
    })

    test('ids beyond 2^53 list, read and page exactly', async (t) => {
      const server = await startServer(t, { store })
      const ids = ['-9223372036854775808', '9007199254740993', '9007199254740994', '9223372036854775806', '9223372036854775807']
      await seed(server, ids.map(id => ({ id, name: `n${id}` })))
      const page = await call(server, 'GET', '/plants?limit=2&after=9007199254740993')
      assert.equal(page.text, '[{"id":9007199254740994,"name":"n9007199254740994"},{"id":9223372036854775806,"name":"n9223372036854775806"}]')
      assert.equal(page.headers.get('link'), '</plants?limit=2&after=9223372036854775806>; rel="next"')
      assert.equal((await call(server, 'GET', '/plants?after=-9223372036854775808&limit=1')).text, '[{"id":9007199254740993,"name":"n9007199254740993"}]')
    })

    test('GET /plants/{id}', async (t) => {
      const server = await startServer(t, { store })
      await seed(server, [{ id: '9223372036854775807', name: 'Max', tag: 'big' }, { id: '-9223372036854775808', name: 'Min' }])

      await t.test('finds int64 extremes exactly', async () => {
        assert.equal((await call(server, 'GET', '/plants/9223372036854775807')).text, '{"id":9223372036854775807,"name":"Max","tag":"big"}')
        assert.equal((await call(server, 'GET', '/plants/-9223372036854775808')).text, '{"id":-9223372036854775808,"name":"Min"}')
      })

      await t.test('404 for an id that holds no plant, including the neighbour of one that does', async () => {
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/9223372036854775806'), 404))
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/0'), 404))
      })

      await t.test('400, not 404 or 500, for a path id that is not an int64', async () => {
        for (const id of ['abc', '1.5', '1e3', '9223372036854775808', '-9223372036854775809', '99999999999999999999999', '%20', '0x10']) {
          const answer = await call(server, 'GET', `/plants/${id}`)
          assert.ok(isErrorBody(answer, 400), `${id}: ${answer.status} ${answer.text}`)
        }
      })
    })

    test('PUT /plants/{id}', async (t) => {
      const server = await startServer(t, { store })
      await seed(server, [{ id: 1, name: 'Fern', tag: 'shade' }, { id: '9223372036854775807', name: 'Max' }])

      await t.test('replaces name and tag and answers the record', async () => {
        const answer = await call(server, 'PUT', '/plants/1', { body: { name: 'Royal fern', tag: 'wet', id: 99, extra: true } })
        assert.equal(answer.status, 200)
        assert.equal(answer.text, '{"id":1,"name":"Royal fern","tag":"wet"}')
        assert.equal((await call(server, 'GET', '/plants/1')).text, '{"id":1,"name":"Royal fern","tag":"wet"}')
      })

      await t.test('a body without tag removes the tag', async () => {
        assert.equal((await call(server, 'PUT', '/plants/1', { body: { name: 'Fern' } })).text, '{"id":1,"name":"Fern"}')
        assert.equal((await call(server, 'GET', '/plants/1')).text, '{"id":1,"name":"Fern"}')
      })

      await t.test('works on int64 extremes', async () => {
        assert.equal((await call(server, 'PUT', '/plants/9223372036854775807', { body: { name: 'Maximum' } })).text, '{"id":9223372036854775807,"name":"Maximum"}')
      })

      await t.test('404 for an unknown plant, which is not created', async () => {
        assert.ok(isErrorBody(await call(server, 'PUT', '/plants/2', { body: { name: 'Ghost' } }), 404))
        assert.equal((await call(server, 'GET', '/plants/2')).status, 404)
      })

      await t.test('400 for a bad body or a bad id, changing nothing', async () => {
        for (const raw of ['', '{}', '{"name": ""}', '{"name": 1}', '{"name": "x", "tag": null}', `{"name": "${'n'.repeat(201)}"}`, '[]', 'nope']) {
          const answer = await call(server, 'PUT', '/plants/1', { raw, headers: { 'content-type': 'application/json' } })
          assert.ok(isErrorBody(answer, 400), `${raw}: ${answer.status} ${answer.text}`)
        }
        assert.ok(isErrorBody(await call(server, 'PUT', '/plants/abc', { body: { name: 'x' } }), 400))
        assert.ok(isErrorBody(await call(server, 'PUT', '/plants/1', { raw: '{"name": "x"}', headers: { 'content-type': 'text/plain' } }), 415))
        assert.equal((await call(server, 'GET', '/plants/1')).text, '{"id":1,"name":"Fern"}')
      })

      await t.test('401 without a token', async () => {
        assert.ok(isErrorBody(await call(server, 'PUT', '/plants/1', { body: { name: 'x' }, token: null }), 401))
      })
    })

    test('DELETE /plants/{id}', async (t) => {
      const server = await startServer(t, { store })
      await seed(server, [{ id: 1, name: 'Fern' }, { id: '-9223372036854775808', name: 'Min' }])

      await t.test('204 with no body, then the plant is gone and its id free again', async () => {
        const answer = await call(server, 'DELETE', '/plants/1')
        assert.equal(answer.status, 204)
        assert.equal(answer.text, '')
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/1'), 404))
        assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Reborn' } })).status, 200)
      })

      await t.test('404 the second time, and for ids that never existed', async () => {
        assert.equal((await call(server, 'DELETE', '/plants/-9223372036854775808')).status, 204)
        assert.ok(isErrorBody(await call(server, 'DELETE', '/plants/-9223372036854775808'), 404))
        assert.ok(isErrorBody(await call(server, 'DELETE', '/plants/42'), 404))
      })

      await t.test('400 for a bad id, 401 without a token', async () => {
        assert.ok(isErrorBody(await call(server, 'DELETE', '/plants/one'), 400))
        assert.ok(isErrorBody(await call(server, 'DELETE', '/plants/1', { token: null }), 401))
        assert.equal((await call(server, 'GET', '/plants/1')).status, 200)
      })
    })

    test('every operation in the document is served, and answers each failure it lists with the Error body', async (t) => {
      const server = await startServer(t, { store })
      const created = cli(server, ['tokens', 'create', '--name', 'admin-only', '--scope', 'admin'])
      assert.equal(created.status, 0, created.stderr)
      const plantsOnly = cli(server, ['tokens', 'create', '--name', 'plants-only', '--scope', 'plants:read', '--scope', 'plants:write'])
      assert.equal(plantsOnly.status, 0, plantsOnly.stderr)
      const tokens = { all: server.token, adminOnly: created.stdout.trim(), plantsOnly: plantsOnly.stdout.trim() }
      const doc = (await call(server, 'GET', '/openapi.json', { token: null })).body
      // Routed: not answered as an unknown route is (a 404 of its own, such as an unknown file under /docs/, is routed).
      const unknownRoute = (await call(server, 'GET', '/no-such-route', { token: null })).text
      let checked = 0
      for (const [path, item] of Object.entries(doc.paths as Record<string, any>)) {
        for (const method of ['get', 'post', 'put', 'delete'].filter(m => item[m] !== undefined)) {
          const routed = await call(server, method.toUpperCase(), path.replace(/\{\w+\}/g, '1'), { token: null })
          assert.ok(routed.text !== unknownRoute && routed.status !== 405, `${method} ${path} is routed: ${routed.status} ${routed.text}`)
          for (const status of Object.keys(item[method].responses)) {
            const request = provoke(method, path, status, tokens)
            if (request === undefined) continue
            const answer = await call(server, method.toUpperCase(), request.path, { token: request.token, body: request.body })
            assert.ok(isErrorBody(answer, Number(status)), `${method} ${request.path} should answer ${status}: ${answer.status} ${answer.text}`)
            checked++
          }
        }
      }
      assert.ok(checked >= 50, `only ${checked} listed failures provoked`)
    })
  })
}
