import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { call, freshDatabase, startServer, testStores, type Server } from '../helpers.js'

const KILLS = 5
const CONCURRENCY = 16

/** POSTs unique plants from `CONCURRENCY` loops until the server dies; returns the ids answered 200. */
async function writeUntilKilled (server: Server, firstId: number): Promise<number[]> {
  const acknowledged: number[] = []
  let next = firstId
  const loop = async (): Promise<void> => {
    for (;;) {
      const id = next++
      try {
        const answer = await call(server, 'POST', '/plants', { body: { id, name: `plant ${id}` } })
        if (answer.status === 200) acknowledged.push(id)
      } catch {
        return // connection refused or reset: the server is gone
      }
    }
  }
  const loops = Array.from({ length: CONCURRENCY }, loop)
  // Killed at a random moment once writes are being acknowledged: on a busy machine the first
  // answers may take longer than the whole window would.
  for (const until = Date.now() + 10_000; acknowledged.length === 0 && Date.now() < until;) await sleep(10)
  await sleep(Math.random() * 250)
  server.process.kill('SIGKILL')
  await Promise.all(loops)
  return acknowledged
}

for (const store of testStores()) {
  describe(store, () => {
    test(`SIGKILL in the middle of concurrent writes loses no acknowledged plant (${KILLS} kills)`, async (t) => {
      const database = await freshDatabase(t, store)
      let token: string | undefined
      const acknowledged: number[] = []
      for (let round = 0; round < KILLS; round++) {
        const server = await startServer(t, { ...database, token })
        token = server.token
        const ids = await writeUntilKilled(server, round * 1_000_000)
        assert.ok(ids.length > 0, `round ${round}: some writes were acknowledged before the kill`)
        acknowledged.push(...ids)
        await server.exited
      }
      const server = await startServer(t, { ...database, token })
      const missing = []
      for (const id of acknowledged) {
        const answer = await call(server, 'GET', `/plants/${id}`)
        if (answer.status !== 200 || answer.body.name !== `plant ${id}`) missing.push(id)
      }
      assert.deepEqual(missing, [], `${missing.length} of ${acknowledged.length} acknowledged plants were lost`)
    })
  })
}
