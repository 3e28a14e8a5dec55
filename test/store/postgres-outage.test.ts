// The PostgreSQL store when its connections are cut under it (test/tcp-proxy.ts): the cases the
// HTTP outage tests cannot aim at, such as a connection lost in the middle of a transaction.
import assert from 'node:assert/strict'
import pg from 'pg'
import { test, type TestContext } from 'node:test'
import { StoreUnavailableError } from '../../src/errors.js'
import { PostgresStore } from '../../src/store/postgres.js'
import { ALL_SCOPES } from '../../src/store/store.js'
import { waitFor } from '../pg-cluster.js'
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
  test('a batch of creates that begins on the host the store moved to, and loses it, starts a search of its own', async (t) => {
    const { url } = await pgSchema(t)
    const target = new URL(url)
    const server = { host: target.hostname, port: Number(target.port === '' ? 5432 : target.port) }
    const first = await startTcpProxy(t, server)
    const second = await startTcpProxy(t, server)
    const store = await PostgresStore.open(`${url.replace(target.host, `127.0.0.1:${first.port},127.0.0.1:${second.port}`)}&target_session_attrs=read-write`)
    t.after(() => store.close())
    const searches: string[] = []
    store.onSearch = event => searches.push('lost' in event ? `lost ${event.lost}` : 'slow' in event ? `slow ${event.slow}` : `found ${event.found}`)
    const direct = new pg.Client({ connectionString: url })
    await direct.connect()
    t.after(() => direct.end())
    const turn = async (): Promise<void> => await new Promise(resolve => setTimeout(resolve, 50))

    // The head's row, held by another session, keeps two batches waiting on the first host's
    // connections; a third create, asked for before any search, waits for a batch to end.
    await direct.query('BEGIN')
    await direct.query('SELECT * FROM change_log FOR UPDATE')
    const held = [store.create({ id: 1n, name: 'Fern' })]
    await turn()
    held.push(store.create({ id: 2n, name: 'Ivy' }))
    await turn()
    const third = assert.rejects(store.create({ id: 3n, name: 'Moss' }), StoreUnavailableError)
    // The first host takes no new connection: a read needs one, and the store moves to the second.
    first.refuseNew()
    await assert.rejects(store.get(1n), StoreUnavailableError)
    await waitFor(async () => searches.length === 2, 'the store moves to the second host', 1500)
    // The second host goes and the first comes back; the held batches end on their connections,
    // and the third create's batch begins on the second host's pool, and fails there.
    second.reset()
    first.restore()
    await direct.query('ROLLBACK')
    assert.deepEqual((await Promise.all(held)).map(created => created.outcome), ['created', 'created'])
    await third
    await waitFor(async () => searches.length === 4, 'a search after the batch lost the second host', 1500)
    assert.deepEqual(searches, [`lost 127.0.0.1:${first.port}`, `found 127.0.0.1:${second.port}`, `lost 127.0.0.1:${second.port}`, `found 127.0.0.1:${first.port}`])
    assert.equal((await store.create({ id: 3n, name: 'Moss' })).outcome, 'created', 'back on the first host')
  })
}
