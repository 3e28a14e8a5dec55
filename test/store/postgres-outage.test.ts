// The PostgreSQL store when its connections are cut under it (test/tcp-proxy.ts): the cases the
// HTTP outage tests cannot aim at, such as a connection lost in the middle of a transaction.
import assert from 'node:assert/strict'
import pg from 'pg'
import { test, type TestContext } from 'node:test'
import { StoreUnavailableError } from '../../src/errors.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { ALL_SCOPES } from '../../src/store/store.js'
import { startTcpProxy, type TcpProxy } from '../tcp-proxy.js'
import { PG_SKIP, PG_URL, pgSchema } from './postgres-helpers.js'

/** A store whose connections go through a proxy, and a direct client on the same schema. */
async function proxied (t: TestContext): Promise<{ store: PostgresStore, proxy: TcpProxy, direct: pg.Client }> {
  const { url } = await pgSchema(t)
  const target = new URL(url)
  const proxy = await startTcpProxy(t, { host: target.hostname, port: Number(target.port === '' ? 5432 : target.port) })
  const through = new URL(url)
  through.hostname = '127.0.0.1'
  through.port = String(proxy.port)
  const store = await PostgresStore.open(through.href)
  t.after(() => store.close())
  const direct = new pg.Client({ connectionString: url })
  await direct.connect()
  t.after(() => direct.end())
  return { store, proxy, direct }
}

const token = { name: 'initial', digest: Buffer.alloc(32, 1), scopes: ALL_SCOPES }

if (PG_URL === undefined) {
  test('PostgreSQL store through a cut connection', { skip: PG_SKIP }, () => {})
} else {
  for (const cut of ['reset', 'blackhole'] as const) {
    test(`a connection cut (${cut}) in the middle of a transaction is unavailable, not a crash, and the next transaction goes through`, async (t) => {
      const { store, proxy, direct } = await proxied(t)
      // Held by another session, the lock row keeps createFirstToken waiting inside its transaction.
      await direct.query('BEGIN')
      await direct.query("SELECT * FROM schema_lock WHERE name = 'first-token' FOR UPDATE")
      const started = Date.now()
      const waiting = store.createFirstToken(token)
      await new Promise(resolve => setTimeout(resolve, 300))
      proxy[cut]()
      await assert.rejects(waiting, StoreUnavailableError)
      assert.ok(Date.now() - started < 2000, `answered after ${Date.now() - started} ms`)
      await direct.query('ROLLBACK')
      proxy.restore()
      // The process is still here (an 'error' with no listener would have ended it), and recovers.
      // What a blackhole held may go through once restored: the first call's token, made late.
      let answered = false
      for (let attempt = 0; attempt < 20 && !answered; attempt++) {
        answered = await store.createFirstToken(token).then(() => true, () => false)
        if (!answered) await new Promise(resolve => setTimeout(resolve, 200))
      }
      assert.ok(answered, 'the store answers again')
      assert.deepEqual((await store.listTokens()).map(record => record.name), ['initial'], 'exactly one first token')
    })
  }
}
