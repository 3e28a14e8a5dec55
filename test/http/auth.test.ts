import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, cli, freshDatabase, isErrorBody, startServer, testStores } from '../helpers.js'
import { databaseContents } from '../stored.js'

const PLANT = { id: 1, name: 'Fern' }

for (const store of testStores()) {
  describe(store, () => {
    test('the first start prints one token with every scope, and only the first', async (t) => {
      const server = await startServer(t, { store })
      assert.match(server.token, /^pst_[A-Za-z0-9_-]{43}$/)
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT })).status, 200)
      assert.match(cli(server, ['tokens', 'list']).stdout, /\tinitial\tplants:read,plants:write,admin\tactive/)
      server.process.kill('SIGTERM')
      await server.exited
      const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
      assert.doesNotMatch(again.stderr(), /pst_/)
      assert.equal((await call(again, 'GET', '/plants/1')).status, 200)
    })

    test('401 with WWW-Authenticate: Bearer for every kind of bad token, alike', async (t) => {
      const server = await startServer(t, { store })
      const revoked = cli(server, ['tokens', 'create', '--name', 'gone']).stdout.trim()
      assert.equal(cli(server, ['tokens', 'revoke', 'gone']).status, 0)
      const expiring = cli(server, ['tokens', 'create', '--name', 'brief', '--expires-in', '1s']).stdout.trim()
      await new Promise(resolve => setTimeout(resolve, 1100))
      const cases: Array<[string, Record<string, string>]> = [
        ['missing', {}],
        ['empty', { authorization: '' }],
        ['no scheme', { authorization: server.token }],
        ['basic scheme', { authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }],
        ['bearer without token', { authorization: 'Bearer' }],
        ['malformed', { authorization: 'Bearer not-a-token' }],
        ['unknown', { authorization: `Bearer pst_${'A'.repeat(43)}` }],
        ['token with a character changed', { authorization: `Bearer ${server.token.slice(0, -1)}${server.token.endsWith('A') ? 'B' : 'A'}` }],
        ['revoked', { authorization: `Bearer ${revoked}` }],
        ['expired', { authorization: `Bearer ${expiring}` }]
      ]
      const messages = new Set<string>()
      for (const [why, headers] of cases) {
        const answer = await call(server, 'POST', '/plants', { body: PLANT, token: null, headers })
        assert.ok(isErrorBody(answer, 401), `${why}: ${answer.status} ${answer.text}`)
        assert.equal(answer.headers.get('www-authenticate'), 'Bearer', why)
        messages.add(answer.body.message)
      }
      assert.equal(messages.size, 1, 'the message does not say which kind of bad token it was')
      assert.equal((await call(server, 'GET', '/plants/1')).status, 404, 'nothing was stored')
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT, headers: { authorization: `bearer  ${server.token}` } })).status, 200, 'the scheme is case-insensitive')
    })

    test('revocation takes effect on the next request', async (t) => {
      const server = await startServer(t, { store })
      const token = cli(server, ['tokens', 'create', '--name', 'soon-revoked']).stdout.trim()
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT, token })).status, 200)
      const list = cli(server, ['tokens', 'list']).stdout
      const id = /^(\d+)\tsoon-revoked/m.exec(list)?.[1]
      assert.ok(id !== undefined, list)
      assert.equal(cli(server, ['tokens', 'revoke', id]).status, 0, 'revoke by id')
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT, token })).status, 401)
    })

    test('tokens create prints the token alone on stdout; list never shows secrets', async (t) => {
      const database = await freshDatabase(t, store)
      const created = cli(database, ['tokens', 'create', '--name', 'ci', '--scope', 'plants:read', '--expires-in', '30d'])
      assert.equal(created.status, 0, created.stderr)
      assert.match(created.stdout, /^pst_[A-Za-z0-9_-]{43}\n$/)
      const list = cli(database, ['tokens', 'list'])
      assert.match(list.stdout, /\tci\tplants:read\tactive\t.*expires 20/)
      assert.doesNotMatch(list.stdout, /pst_/)
    })

    test('tokens create refuses bad input with one line and no token', async (t) => {
      const database = await freshDatabase(t, store)
      assert.equal(cli(database, ['tokens', 'create', '--name', 'taken']).status, 0)
      for (const args of [['--name', 'taken'], [], ['--name', 'x', '--scope', 'root'], ['--name', 'x', '--expires-in', 'soon'], ['--name', 'x', '--bogus']]) {
        const result = cli(database, ['tokens', 'create', ...args])
        assert.equal(result.status, 1, args.join(' '))
        assert.equal(result.stdout, '')
        assert.match(result.stderr, /^plantstore: /)
      }
      assert.equal(cli(database, ['tokens', 'revoke', 'nobody']).status, 1)
    })

    test('the database holds no token, only digests', async (t) => {
      const server = await startServer(t, { store })
      const more = [cli(server, ['tokens', 'create', '--name', 'a']).stdout.trim(), cli(server, ['tokens', 'create', '--name', 'b']).stdout.trim()]
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT })).status, 200)
      server.process.kill('SIGTERM')
      await server.exited
      const bytes = await databaseContents(server)
      assert.ok(bytes.includes('Fern'), 'what is stored is there to be searched')
      for (const token of [server.token, ...more]) {
        assert.ok(token.startsWith('pst_'))
        // As text, and as bytes in either form a store keeps them (raw in SQLite's file, hex in PostgreSQL's bytea as text).
        const secret = Buffer.from(token.slice(4), 'base64url')
        assert.equal(secret.length, 32)
        for (const [form, what] of [[token, 'the token'], [token.slice(4), 'its secret part'], [secret, 'the secret\'s bytes'],
          [secret.toString('hex'), 'the secret in hex'], [Buffer.from(token).toString('hex'), 'the token in hex']] as const) {
          assert.equal(bytes.indexOf(form), -1, `${what} is not stored`)
        }
      }
    })

    test('scopes: a read-only token may not write, a write-only token may not read', async (t) => {
      const server = await startServer(t, { store })
      const reader = cli(server, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read']).stdout.trim()
      const writer = cli(server, ['tokens', 'create', '--name', 'writer', '--scope', 'plants:write']).stdout.trim()
      const refused = await call(server, 'POST', '/plants', { body: PLANT, token: reader })
      assert.ok(isErrorBody(refused, 403))
      assert.equal(refused.headers.get('www-authenticate'), 'Bearer error="insufficient_scope", scope="plants:write"', 'RFC 6750 3.1: the scope the operation needs')
      assert.equal((await call(server, 'POST', '/plants', { body: PLANT, token: writer })).status, 200)
      assert.ok(isErrorBody(await call(server, 'PUT', '/plants/1', { body: { name: 'x' }, token: reader }), 403))
      assert.ok(isErrorBody(await call(server, 'DELETE', '/plants/1', { token: reader }), 403))
      assert.equal((await call(server, 'GET', '/plants/1', { token: reader })).status, 200)
      assert.equal((await call(server, 'GET', '/plants', { token: reader })).status, 200)
      assert.ok(isErrorBody(await call(server, 'GET', '/plants/1', { token: writer }), 403))
      assert.ok(isErrorBody(await call(server, 'GET', '/plants', { token: writer }), 403))
      assert.equal((await call(server, 'GET', '/plants/1')).body.name, 'Fern', 'nothing changed')
      // No --scope: plants:read and plants:write, not admin.
      const plain = cli(server, ['tokens', 'create', '--name', 'plain']).stdout.trim()
      assert.match(cli(server, ['tokens', 'list']).stdout, /\tplain\tplants:read,plants:write\tactive/)
      assert.equal((await call(server, 'PUT', '/plants/1', { body: { name: 'Fern' }, token: plain })).status, 200)
      assert.equal((await call(server, 'GET', '/plants/1', { token: plain })).status, 200)
      const admin = await call(server, 'GET', '/webhooks', { token: plain })
      assert.ok(isErrorBody(admin, 403), 'the default scopes hold no admin')
      assert.equal(admin.headers.get('www-authenticate'), 'Bearer error="insufficient_scope", scope="admin"')
    })

    test('rate limit: past RATE_LIMIT_PER_MINUTE a token gets 429 with Retry-After', async (t) => {
      const server = await startServer(t, { store, env: { RATE_LIMIT_PER_MINUTE: '3' } })
      const answers = []
      // Seven requests span at most two one-minute windows of three, so at least one is refused.
      for (let i = 0; i < 7; i++) answers.push(await call(server, 'GET', '/plants'))
      assert.deepEqual(answers.slice(0, 3).map(a => a.status), [200, 200, 200])
      const limited = answers.find(a => a.status === 429)
      assert.ok(limited !== undefined && isErrorBody(limited, 429))
      assert.match(limited.headers.get('retry-after') ?? '', /^\d+$/)
    })

    test('a write refused by the rate limit stores nothing; other tokens are counted apart', async (t) => {
      const server = await startServer(t, { store, env: { RATE_LIMIT_PER_MINUTE: '3' } })
      const reader = cli(server, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read']).stdout.trim()
      let refused: number | undefined
      // Seven writes span at most two one-minute windows of three, so at least one is refused.
      for (let id = 1; id <= 7 && refused === undefined; id++) {
        const answer = await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })
        if (answer.status === 429) refused = id
        else assert.equal(answer.status, 200)
      }
      assert.ok(refused !== undefined, 'one write was refused')
      assert.ok(isErrorBody(await call(server, 'GET', `/plants/${refused}`, { token: reader }), 404), 'the refused plant was not stored')
      assert.equal((await call(server, 'GET', '/plants/1', { token: reader })).status, 200, 'the reader has its own count')
    })
  })
}
