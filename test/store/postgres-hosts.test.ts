// The host the store writes to (SPEC section 10), on the test server: a host down or read-only
// is passed over; the failures that mean the host is lost are 503s that start a search.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { isHostLost, isUnavailable } from '../../src/store/postgres-errors.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { freePort } from '../helpers.js'
import { PG_SKIP, PG_URL, pgSchema } from './postgres-helpers.js'

const skip = PG_URL === undefined ? PG_SKIP : false
const READ_ONLY = `&options=${encodeURIComponent('-c default_transaction_read_only=on')}`

test('read-write passes over a host that is down and one that is read-only, and takes the first that takes writes', { skip }, async (t) => {
  const { url } = await pgSchema(t)
  const down = new URL(url)
  down.host = `127.0.0.1:${await freePort()}`
  const server = new URL(url)
  const hosts = `${down.host},${server.host}`
  const several = url.replace(server.host, hosts)
  const store = await PostgresStore.open(`${several}&target_session_attrs=read-write`)
  t.after(() => store.close())
  assert.equal((await store.create({ id: 1n, name: 'Fern' })).outcome, 'created')

  await assert.rejects(PostgresStore.open(`${several}${READ_ONLY}&target_session_attrs=read-write`),
    (error: Error) => /No database host takes writes \(127\.0\.0\.1:\d+: .*ECONNREFUSED.*; .* is read-only\)/.test(error.message))
})

test('a lost connection, a server shutting down or starting, and a read-only refusal (a demoted primary) mean the host is lost: 503, and a search', () => {
  for (const code of ['08006', '08001', '57P01', '57P02', '57P03', '25006', 'ECONNREFUSED', 'ECONNRESET']) {
    assert.ok(isHostLost({ code }) && isUnavailable({ code }), code)
  }
  assert.ok(isHostLost(new Error('Connection terminated unexpectedly')))
  for (const code of ['57014', '40001', '40P01', '53300']) assert.ok(isUnavailable({ code }) && !isHostLost({ code }), `${code}: a 503 on a host that is fine`)
  // The database refusing the service (its operator's doing, and undoing): a 503, not a 500, and no failover search.
  for (const code of ['28000', '28P01', '3D000', '57P04', '55000', '55P03', '42501']) assert.ok(isUnavailable({ code }) && !isHostLost({ code }), `${code}: a 503`)
  const busy = new Error('timeout exceeded when trying to connect') // pg-pool: no connection free within the deadline
  assert.ok(isUnavailable(busy) && !isHostLost(busy), 'a busy pool is a 503, not a failover')
  for (const code of ['23505', '42P01', '22021']) assert.ok(!isUnavailable({ code }), `${code}: a bug or a refusal, not a 503`)
})
