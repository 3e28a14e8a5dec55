import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, startServer, tempDir, type Server } from '../helpers.js'

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
  await new Promise(resolve => setTimeout(resolve, 150 + Math.random() * 250))
  server.process.kill('SIGKILL')
  await Promise.all(loops)
  return acknowledged
}

test(`SIGKILL in the middle of concurrent writes loses no acknowledged plant (${KILLS} kills)`, async (t) => {
  const dir = tempDir(t)
  let token: string | undefined
  const acknowledged: number[] = []
  for (let round = 0; round < KILLS; round++) {
    const server = await startServer(t, { dir, token })
    token = server.token
    const ids = await writeUntilKilled(server, round * 1_000_000)
    assert.ok(ids.length > 0, `round ${round}: some writes were acknowledged before the kill`)
    acknowledged.push(...ids)
    await server.exited
  }
  const server = await startServer(t, { dir, token })
  const missing = []
  for (const id of acknowledged) {
    const answer = await call(server, 'GET', `/plants/${id}`)
    if (answer.status !== 200 || answer.body.name !== `plant ${id}`) missing.push(id)
  }
  assert.deepEqual(missing, [], `${missing.length} of ${acknowledged.length} acknowledged plants were lost`)
})
