// The real server on PostgreSQL, over HTTP: the resource, the first-start banner, several instances.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, cli, isErrorBody, startServer, tempDir } from '../helpers.js'
import { PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'

const BANNER_TOKEN = /^ {3}(pst_\S+)$/m

if (PG_URL === undefined) {
  test('the server on PostgreSQL', { skip: PG_SKIP }, () => {})
} else {
  test('on PostgreSQL the server prints the first-start banner once and serves the whole resource; a second instance shares it', async (t) => {
    const { url } = await pgSchema(t)
    const server = await startServer(t, { env: { DATABASE_URL: url } })
    assert.match(server.stderr(), /no tokens in the PostgreSQL database in DATABASE_URL/)
    const max = '9223372036854775807'
    const post = await call(server, 'POST', '/plants', { raw: `{"id": ${max}, "name": "Fern 🌿", "tag": "shade"}` })
    assert.equal(post.status, 200)
    assert.deepEqual(post.body, { name: 'Fern 🌿', tag: 'shade' })
    assert.equal((await call(server, 'POST', '/plants', { raw: `{"id": ${max}, "name": "Fern 🌿", "tag": "shade"}` })).status, 200, 'a safe retry')
    assert.equal((await call(server, 'POST', '/plants', { raw: `{"id": ${max}, "name": "Moss"}` })).status, 409)
    const read = await call(server, 'GET', `/plants/${max}`)
    assert.equal(read.status, 200)
    assert.equal(read.text, `{"id":${max},"name":"Fern 🌿","tag":"shade"}`, 'the id digit for digit')
    for (const id of [1, 2, 3]) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `n${id}`, tag: 'shade' } })).status, 200)
    const page = await call(server, 'GET', '/plants?limit=2&tag=shade')
    assert.deepEqual(page.body, [{ id: 1, name: 'n1', tag: 'shade' }, { id: 2, name: 'n2', tag: 'shade' }])
    assert.match(page.headers.get('link') ?? '', /after=2>; rel="next"/)
    assert.deepEqual((await call(server, 'PUT', '/plants/2', { body: { name: 'two' } })).body, { id: 2, name: 'two' })
    assert.equal((await call(server, 'DELETE', '/plants/3')).status, 204)
    assert.equal((await call(server, 'GET', '/plants/3')).status, 404)
    assert.equal((await call(server, 'GET', '/readyz', { token: null })).status, 200)
    const nul = await call(server, 'POST', '/plants', { raw: '{"id": 5, "name": "a\\u0000b"}' })
    assert.ok(isErrorBody(nul, 400), `${nul.status} ${nul.text}: text PostgreSQL cannot keep is the client's error, not a 500`)
    assert.equal((await call(server, 'GET', '/plants?tag=%00')).status, 200)

    const second = await startServer(t, { env: { DATABASE_URL: url }, token: server.token })
    assert.doesNotMatch(second.stderr(), BANNER_TOKEN, 'tokens exist: no second banner')
    assert.deepEqual((await call(second, 'GET', '/plants/2')).body, { id: 2, name: 'two' }, 'written through one, read through the other')

    const made = cli(tempDir(t), ['tokens', 'create', '--name', 'ci'], { DATABASE_URL: url })
    assert.equal(made.status, 0, made.stderr)
    assert.doesNotMatch(made.stderr, /new, empty/, 'no "new, empty store" notice for PostgreSQL')
    assert.equal((await call(second, 'GET', '/plants/1', { token: made.stdout.trim() })).status, 200)
  })

  test('three servers started together on an empty schema all serve, and exactly one prints a first-start token', async (t) => {
    const { url } = await pgSchema(t)
    const servers = await Promise.all([1, 2, 3].map(() => startServer(t, { env: { DATABASE_URL: url }, token: 'none yet' })))
    const deadline = Date.now() + 3000
    const banners = (): string[] => servers.map(s => BANNER_TOKEN.exec(s.stderr())?.[1]).filter((token): token is string => token !== undefined)
    while (banners().length === 0 && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 20))
    await new Promise(resolve => setTimeout(resolve, 500))
    assert.equal(banners().length, 1, servers.map(s => s.stderr()).join('\n'))
    const [token] = banners()
    for (const [i, server] of servers.entries()) {
      assert.equal((await call(server, 'POST', '/plants', { body: { id: i, name: `p${i}` }, token })).status, 200)
    }
    assert.equal((await call(servers[0], 'GET', '/plants', { token })).body.length, 3)
  })
}
