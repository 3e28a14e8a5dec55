// GET /plants/changes as JSON, black box over real HTTP (SPEC section 9), on both stores.
import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, cli, isErrorBody, startServer, testStores, parseExact, type Answer, type ExactChange, type Server } from '../helpers.js'

const BIG = '9223372036854775807'

/** The changes of a JSON answer with position and id kept exact, as strings. */
function changesIn (answer: Answer): ExactChange[] {
  assert.equal(answer.status, 200, answer.text)
  return parseExact(answer.text)
}

function nextAfter (answer: Answer): string {
  const match = /^<\/plants\/changes\?(?:[^>]*&)?after=(\d+)(?:&[^>]*)?>; rel="next"$/.exec(answer.headers.get('link') ?? '')
  assert.ok(match, `a Link to the next page: ${String(answer.headers.get('link'))}`)
  return match[1]
}

async function write (server: Server, method: string, path: string, body?: unknown): Promise<Answer> {
  const answer = await call(server, method, path, { body })
  assert.ok(answer.status < 300, `${method} ${path}: ${answer.status} ${answer.text}`)
  return answer
}

for (const store of testStores()) {
  describe(store, () => {
    test('the JSON feed', async (t) => {
      const server = await startServer(t, { store })

      await t.test('an empty log answers [] and a Link after 0', async () => {
        const answer = await call(server, 'GET', '/plants/changes')
        assert.deepEqual(changesIn(answer), [])
        assert.equal(nextAfter(answer), '0')
      })

      await t.test('every change, in order, the plant as the change left it, ids and positions exact beyond 2^53', async () => {
        await call(server, 'POST', '/plants', { raw: `{"id": ${BIG}, "name": "Fern", "tag": "shade"}` })
        await call(server, 'POST', '/plants', { raw: `{"id": ${BIG}, "name": "Fern", "tag": "shade"}` }) // a retry: nothing logged
        await write(server, 'PUT', `/plants/${BIG}`, { name: 'Fern' })
        await write(server, 'DELETE', `/plants/${BIG}`)
        await write(server, 'POST', '/plants', { id: -5, name: 'Moss', tag: 'shade' })
        const answer = await call(server, 'GET', '/plants/changes?after=0')
        assert.equal(answer.headers.get('content-type'), 'application/json; charset=utf-8')
        const changes = changesIn(answer)
        assert.deepEqual(changes.map(({ position, type, id, plant }) => [position, type, id, plant]), [
          ['1', 'plant.created', BIG, { id: BIG, name: 'Fern', tag: 'shade' }],
          ['2', 'plant.updated', BIG, { id: BIG, name: 'Fern' }],
          ['3', 'plant.deleted', BIG, { id: BIG, name: 'Fern' }],
          ['4', 'plant.created', '-5', { id: '-5', name: 'Moss', tag: 'shade' }]
        ])
        for (const { at } of changes) {
          assert.match(at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/)
          assert.ok(Math.abs(Date.parse(at) - Date.now()) < 60_000)
        }
        assert.equal(nextAfter(answer), '4')
      })

      await t.test('limit pages the log; Link leads from page to page; after is exclusive', async () => {
        const first = await call(server, 'GET', '/plants/changes?limit=3')
        assert.deepEqual(changesIn(first).map(change => change.position), ['1', '2', '3'])
        assert.equal(nextAfter(first), '3')
        const second = await call(server, 'GET', first.headers.get('link')!.slice(1, first.headers.get('link')!.indexOf('>')))
        assert.deepEqual(changesIn(second).map(change => change.position), ['4'])
        assert.equal(nextAfter(second), '4')
        const caughtUp = await call(server, 'GET', '/plants/changes?after=4')
        assert.deepEqual(changesIn(caughtUp), [])
        assert.equal(nextAfter(caughtUp), '4', 'nothing new: the Link stays at N')
      })

      await t.test('tag: the changes of plants that carried it before or after, a replace that removes it included', async () => {
        const answer = await call(server, 'GET', '/plants/changes?tag=shade')
        assert.deepEqual(changesIn(answer).map(change => change.position), ['1', '2', '4'], 'position 2 removed the tag; 3 deleted a plant without it')
        assert.match(answer.headers.get('link') ?? '', /[?&]tag=shade(&|>)/, 'the Link keeps the filter')
        assert.deepEqual(changesIn(await call(server, 'GET', '/plants/changes?tag=none')), [])
        assert.equal(nextAfter(await call(server, 'GET', '/plants/changes?tag=none')), '4', 'passed over, yet read: the Link moves on')
      })

      await t.test('a position beyond the head, or older than the log keeps, is 410 with the Error body', async () => {
        const answer = await call(server, 'GET', '/plants/changes?after=5')
        assert.ok(isErrorBody(answer, 410), answer.text)
        assert.ok(isErrorBody(await call(server, 'GET', `/plants/changes?after=${BIG}`), 410))
      })

      await t.test('bad queries are 400 with the Error body', async () => {
        for (const query of ['limit=0', 'limit=1001', 'limit=x', 'after=-1', 'after=1.5', 'after=', `after=${BIG}0`, 'wait=61', 'wait=-1', 'wait=x']) {
          const answer = await call(server, 'GET', `/plants/changes?${query}`)
          assert.ok(isErrorBody(answer, 400), `${query}: ${answer.status} ${answer.text}`)
        }
      })

      await t.test('auth: 401 without a token, 403 without plants:read; PUT and DELETE are 405 with Allow', async () => {
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/changes', { token: null }), 401))
        const writer = cli(server, ['tokens', 'create', '--name', 'writer', '--scope', 'plants:write']).stdout.trim()
        assert.ok(isErrorBody(await call(server, 'GET', '/plants/changes', { token: writer }), 403))
        for (const method of ['PUT', 'DELETE', 'PATCH']) {
          const answer = await call(server, method, '/plants/changes')
          assert.ok(isErrorBody(answer, 405), `${method}: ${answer.status} ${answer.text}`)
          assert.match(answer.headers.get('allow') ?? '', /\bGET\b/)
        }
      })

      await t.test('long poll: with nothing after N, the answer waits for the first change and comes within ~100 ms of it', async () => {
        const polled = call(server, 'GET', '/plants/changes?after=4&wait=10')
        await new Promise(resolve => setTimeout(resolve, 300))
        const written = await write(server, 'POST', '/plants', { id: 6, name: 'Awaited' })
        const writtenAt = performance.now()
        const answer = await polled
        const lag = performance.now() - writtenAt
        assert.ok(lag < 100, `answered ${lag.toFixed(0)} ms after the write was`)
        assert.deepEqual(changesIn(answer).map(change => [change.position, change.id]), [['5', '6']])
        assert.equal(written.headers.get('etag'), '"5"')
      })

      await t.test('long poll: with no change, the answer is [] at the deadline, with the Link at N', async () => {
        const started = performance.now()
        const answer = await call(server, 'GET', '/plants/changes?after=5&wait=1')
        const took = performance.now() - started
        assert.ok(took >= 950 && took < 2000, `${took.toFixed(0)} ms`)
        assert.deepEqual(changesIn(answer), [])
        assert.equal(nextAfter(answer), '5')
      })

      await t.test('long poll with a tag: changes it does not show do not answer it', async () => {
        const polled = call(server, 'GET', '/plants/changes?after=5&wait=5&tag=rare')
        await new Promise(resolve => setTimeout(resolve, 200))
        await write(server, 'POST', '/plants', { id: 7, name: 'Plain' })
        await new Promise(resolve => setTimeout(resolve, 300))
        await write(server, 'POST', '/plants', { id: 8, name: 'Rare', tag: 'rare' })
        const answer = await polled
        assert.deepEqual(changesIn(answer).map(change => [change.position, change.id]), [['7', '8']])
      })

      await t.test('long poll: a token revoked or expired while its poll waits gets 401, not the changes made since', async () => {
        const revoked = cli(server, ['tokens', 'create', '--name', 'revoked-poller', '--scope', 'plants:read']).stdout.trim()
        const expiring = cli(server, ['tokens', 'create', '--name', 'expiring-poller', '--scope', 'plants:read', '--expires-in', '3s']).stdout.trim()
        const expiresAt = Date.now() + 3000
        const head = nextAfter(await call(server, 'GET', '/plants/changes?limit=1000'))
        const polls = [revoked, expiring].map(token => call(server, 'GET', `/plants/changes?after=${head}&wait=15`, { token }))
        assert.equal(cli(server, ['tokens', 'revoke', 'revoked-poller']).status, 0) // returns once no server accepts it
        await new Promise(resolve => setTimeout(resolve, Math.max(0, expiresAt - Date.now()) + 1200)) // past the expiry and the token cache's second
        await write(server, 'POST', '/plants', { id: 9, name: 'After the revocation' })
        for (const answer of await Promise.all(polls)) {
          assert.ok(isErrorBody(answer, 401), `${answer.status} ${answer.text}`)
          assert.equal(answer.headers.get('www-authenticate'), 'Bearer')
        }
      })
    })

    test('without limit a page holds 100 changes, and its Link leads to the rest', async (t) => {
      const server = await startServer(t, { store })
      for (let id = 1; id <= 101; id++) await write(server, 'POST', '/plants', { id, name: `p${id}` })
      const first = await call(server, 'GET', '/plants/changes')
      assert.deepEqual(changesIn(first).map(change => change.position), Array.from({ length: 100 }, (_, i) => String(i + 1)))
      assert.equal(nextAfter(first), '100')
      const rest = await call(server, 'GET', '/plants/changes?after=100')
      assert.deepEqual(changesIn(rest).map(change => change.position), ['101'])
    })

    test('list-then-watch: a change committed during the list is in the list or in the feed after its Changes-Position, never both, never neither', async (t) => {
      const server = await startServer(t, { store })
      let next = 0
      const writing = { until: true }
      const written = new Set<number>()
      const writers = Array.from({ length: 8 }, async () => {
        while (writing.until) {
          const id = next++
          const answer = await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })
          assert.equal(answer.status, 200)
          written.add(id)
        }
      })
      const lists: Array<{ listed: Set<number>, position: string }> = []
      for (let round = 0; round < 6; round++) {
        await new Promise(resolve => setTimeout(resolve, 40))
        const answer = await call(server, 'GET', '/plants?limit=1000')
        assert.equal(answer.status, 200)
        const position = answer.headers.get('changes-position')
        assert.match(position ?? '', /^\d+$/)
        lists.push({ listed: new Set((answer.body as Array<{ id: number }>).map(plant => plant.id)), position: position! })
      }
      writing.until = false
      await Promise.all(writers)
      assert.ok(written.size < 1000, 'one page lists every plant')
      for (const { listed, position } of lists) {
        const feed = new Set<number>()
        for (let after = position; ;) {
          const answer = await call(server, 'GET', `/plants/changes?after=${after}&limit=1000`)
          const changes = changesIn(answer)
          for (const change of changes) feed.add(Number(change.id))
          if (changes.length === 0) break
          after = nextAfter(answer)
        }
        for (const id of written) assert.ok(listed.has(id) !== feed.has(id), `plant ${id}: listed ${listed.has(id)}, in the feed after ${position} ${feed.has(id)}`)
      }
    })

    test('retention: changes older than CHANGES_RETENTION are dropped; their positions answer 410, the rest is served', async (t) => {
      const server = await startServer(t, { store, env: { CHANGES_RETENTION: '1s' } })
      await write(server, 'POST', '/plants', { id: 1, name: 'Old' })
      await new Promise(resolve => setTimeout(resolve, 1600))
      await write(server, 'POST', '/plants', { id: 2, name: 'New' })
      assert.ok(isErrorBody(await call(server, 'GET', '/plants/changes?after=0'), 410))
      const kept = await call(server, 'GET', '/plants/changes?after=1')
      assert.deepEqual(changesIn(kept).map(change => change.id), ['2'])
      assert.deepEqual(changesIn(await call(server, 'GET', '/plants/changes')).map(change => change.id), ['2'], 'no after: from the oldest kept')
      assert.equal((await call(server, 'GET', '/plants/1')).status, 200, 'the plant stays')
    })
  })
}
