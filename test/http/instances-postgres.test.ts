// Several server processes on one PostgreSQL schema are one service: concurrent writes of one id,
// revocation, and the rate limit. (Reads across instances and the one first-start banner: resource-postgres.test.ts.)
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { WINDOW_MS } from '../../src/rate-limit.js'
import { call, cli, isErrorBody, MAIN, tempDir, twoInstances, type Answer, type Server } from '../helpers.js'
import { adminQuery, PG_SKIP, PG_URL } from '../store/postgres-helpers.js'

/**
 * Runs `phase` within one one-minute window of the rate limit: first waits for the next window
 * if fewer than `seconds` are left in this one, and fails if the phase still crossed into another.
 */
async function inOneWindow<T> (seconds: number, phase: () => Promise<T>): Promise<T> {
  const left = WINDOW_MS - (Date.now() % WINDOW_MS)
  if (left < seconds * 1000) await sleep(left + 50)
  const started = Date.now()
  const result = await phase()
  assert.equal(Math.floor(Date.now() / WINDOW_MS), Math.floor(started / WINDOW_MS), `the phase took ${Date.now() - started} ms and crossed into the next window`)
  return result
}

/** The servers' log lines about the rate limit, to explain a failure. */
const rateLog = (servers: Server[]): string => servers.map(server => server.stdout().split('\n').filter(line => /rate limit/.test(line)).join('\n')).join('\n')

/** A new token with the default scopes, made by the CLI on the servers' database. */
function newToken (t: Parameters<typeof tempDir>[0], url: string, name: string): string {
  const made = cli(tempDir(t), ['tokens', 'create', '--name', name], { DATABASE_URL: url })
  assert.equal(made.status, 0, made.stderr)
  return made.stdout.trim()
}

if (PG_URL === undefined) {
  test('several instances on PostgreSQL', { skip: PG_SKIP }, () => {})
} else {
  test('the same id posted to two instances at once: one stored plant, 200 for the winner and an identical body, 409 for a different one', async (t) => {
    const { servers: [a, b] } = await twoInstances(t)
    const ids = Array.from({ length: 100 }, (_, i) => i + 1)
    const wins = [0, 0]
    // Ten races at a time, so that each pair of requests meets in the database.
    for (let i = 0; i < ids.length; i += 10) {
      await Promise.all(ids.slice(i, i + 10).map(async (id) => {
        const same = id <= 50
        const bodies = same ? [{ id, name: `p${id}`, tag: 't' }, { id, name: `p${id}`, tag: 't' }] : [{ id, name: `a${id}` }, { id, name: `b${id}` }]
        const answers = await Promise.all([call(a, 'POST', '/plants', { body: bodies[0] }), call(b, 'POST', '/plants', { body: bodies[1] })])
        const stored = [(await call(a, 'GET', `/plants/${id}`)).body, (await call(b, 'GET', `/plants/${id}`)).body]
        if (same) {
          assert.deepEqual(answers.map(answer => answer.status), [200, 200], `id ${id}: an identical body is a safe retry`)
          assert.deepEqual(answers.map(answer => answer.body), [{ name: `p${id}`, tag: 't' }, { name: `p${id}`, tag: 't' }])
          assert.deepEqual(stored, [bodies[0], bodies[0]])
        } else {
          const winner = answers.findIndex(answer => answer.status === 200)
          assert.ok(winner !== -1, `id ${id}: ${answers.map(answer => answer.status).join(', ')}`)
          wins[winner]++
          assert.ok(isErrorBody(answers[1 - winner], 409), `id ${id}: the other is 409, ${answers[1 - winner].status}`)
          assert.deepEqual(stored, [bodies[winner], bodies[winner]], `id ${id}: the winner's plant, read through either instance`)
        }
      }))
    }
    t.diagnostic(`of 50 races with different bodies, the first instance won ${wins[0]}, the second ${wins[1]}`)
    const page = await call(a, 'GET', '/plants?limit=1000')
    assert.deepEqual(page.body.map((plant: { id: number }) => plant.id), ids, 'one plant an id')
  })

  test('a token revoked with the CLI is refused by every instance before `tokens revoke` returns, within 5 s of the revocation', async (t) => {
    const { servers, url } = await twoInstances(t)
    const token = newToken(t, url, 'leaving')
    for (const server of servers) assert.equal((await call(server, 'GET', '/plants/1', { token })).status, 404, 'accepted, and now in the instance\'s token cache')
    // Each instance is asked every 10 ms, which keeps the token in its cache: the slowest case.
    const deadline = Date.now() + 10_000
    const refusedAt = servers.map(async (server) => {
      while (Date.now() < deadline) {
        const answer = await call(server, 'GET', '/plants/1', { token })
        if (answer.status === 401) return Date.now()
        assert.equal(answer.status, 404)
        await sleep(10)
      }
      return Infinity
    })
    const revoke = spawn(process.execPath, [MAIN, 'tokens', 'revoke', 'leaving'], { env: { ...process.env, DATABASE_URL: url }, stdio: 'ignore' })
    const code = await new Promise(resolve => revoke.once('exit', resolve))
    const returnedAt = Date.now()
    assert.equal(code, 0)
    for (const server of servers) assert.ok(isErrorBody(await call(server, 'GET', '/plants/1', { token }), 401), 'refused once revoke has returned')
    const listed = cli(tempDir(t), ['tokens', 'list'], { DATABASE_URL: url }).stdout
    const revokedAt = Date.parse(/leaving\t\S+\trevoked (\S+)/.exec(listed)?.[1] ?? '')
    assert.ok(Number.isFinite(revokedAt), listed)
    const delays = (await Promise.all(refusedAt)).map(at => at - revokedAt)
    t.diagnostic(`refused by the instances ${delays.join(' and ')} ms after the revocation; the CLI returned after ${returnedAt - revokedAt} ms`)
    for (const delay of delays) assert.ok(delay >= 0 && delay <= 5000, `${delay} ms`)
  })

  test('the rate limit holds for the service: a slow stream up to the limit through two instances is all accepted, a burst is 10% over at most', async (t) => {
    const { servers, url } = await twoInstances(t, { RATE_LIMIT_PER_MINUTE: '100' })
    const streamToken = newToken(t, url, 'stream')
    await inOneWindow(30, async () => {
      for (let i = 0; i < 100; i++) {
        const answer = await call(servers[i % 2], 'GET', '/plants/1', { token: streamToken })
        assert.equal(answer.status, 404, `request ${i + 1} of 100, through instance ${i % 2}`)
        await sleep(5)
      }
      // Past the limit an instance may not have seen the other's last requests yet: a few more may pass, then none.
      const after: Answer[] = []
      for (let i = 0; i < 20; i++) after.push(await call(servers[i % 2], 'GET', '/plants/1', { token: streamToken }))
      const over = after.filter(answer => answer.status === 404).length
      t.diagnostic(`stream: 100 of 100 accepted, then ${over} of 20 more`)
      assert.ok(over <= 10, `${over} accepted past the limit\n${rateLog(servers)}`)
      assert.deepEqual(after.slice(-2).map(answer => answer.status), [429, 429], 'then refused by both')
      for (const answer of after.filter(answer => answer.status !== 404)) assertRateLimited(answer)
    })

    const burst = await inOneWindow(20, () => Promise.all(Array.from({ length: 300 }, (_, i) => call(servers[i % 2], 'GET', '/plants/1'))))
    const accepted = burst.filter(answer => answer.status === 404)
    const refused = burst.filter(answer => answer.status !== 404)
    t.diagnostic(`burst: ${accepted.length} of 300 accepted at a limit of 100 (${burst.filter((answer, i) => i % 2 === 0 && answer.status === 404).length} through the first instance)`)
    assert.ok(accepted.length >= 100 && accepted.length <= 110, `${accepted.length} accepted\n${rateLog(servers)}`)
    for (const answer of refused) assertRateLimited(answer)
  })

  test('far from the limit, two instances write their counts a few times a second, not once a request', async (t) => {
    const { servers, schema } = await twoInstances(t, { RATE_LIMIT_PER_MINUTE: '60000' })
    const started = Date.now()
    // Twenty clients, fifty requests each, through both instances.
    await Promise.all(Array.from({ length: 20 }, async (_, client) => {
      for (let i = 0; i < 50; i++) assert.equal((await call(servers[(client + i) % 2], 'GET', '/plants/1')).status, 404)
    }))
    const seconds = (Date.now() - started) / 1000
    for (const server of servers) server.process.kill('SIGTERM')
    await Promise.all(servers.map(server => server.exited))
    await sleep(500) // a backend's statistics reach pg_stat_user_tables as it exits
    const { rows } = await adminQuery("SELECT n_tup_ins + n_tup_upd AS writes FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'rate_windows'", [schema])
    const writes = Number(rows[0].writes)
    t.diagnostic(`1000 requests in ${seconds.toFixed(1)} s: ${writes} rows written to rate_windows`)
    // At most one sync an instance every 200 ms (and one to start, one at a new minute, and one of
    // the last counts, while the instance stops: its idle connections are given half a second): a
    // request costs none.
    assert.ok(writes > 0 && writes <= 2 * (seconds * 5 + 3) && writes < 1000 / 5, `${writes} writes`)
  })
}

function assertRateLimited (answer: Answer): void {
  assert.ok(isErrorBody(answer, 429), `${answer.status} ${answer.text}`)
  const retryAfter = Number(answer.headers.get('retry-after'))
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After: ${answer.headers.get('retry-after')}`)
}
