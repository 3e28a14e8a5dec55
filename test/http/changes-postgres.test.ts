// The change log across instances on one PostgreSQL (SPEC section 9, "Position"): two server
// processes write concurrently from many connections while a reader follows the feed throughout.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, twoInstances, parseExact, type Answer, type ExactChange, type Server } from '../helpers.js'
import { PG_SKIP, PG_URL } from '../store/postgres-helpers.js'

const WRITES = 1000
const WRITERS = 32

/** The changes of a feed answer as [position, id, name], bigints kept exact as strings. */
function changesIn (answer: Answer): ExactChange[] {
  assert.equal(answer.status, 200, answer.text)
  return parseExact(answer.text)
}

test('two instances writing at once: a reader following the feed finds every acknowledged change exactly once, in position order, with no gap', { skip: PG_URL === undefined ? PG_SKIP : false, timeout: 120_000 }, async (t) => {
  const { servers } = await twoInstances(t)
  const acknowledged = new Map<string, string>() // position → the name the write answered
  const seen: Array<{ position: string, name: string }> = []
  let writing = true

  // The reader: long polls, alternating between the instances, from the last position it read.
  const reading = (async () => {
    let after = '0'
    for (let round = 0; ; round++) {
      const server: Server = servers[round % 2]
      const answer = await call(server, 'GET', `/plants/changes?after=${after}&limit=50&wait=1`)
      const changes = changesIn(answer)
      for (const change of changes) seen.push({ position: change.position, name: change.plant.name })
      if (changes.length > 0) after = changes[changes.length - 1].position
      else if (!writing) return
    }
  })()

  let next = 0
  await Promise.all(Array.from({ length: WRITERS }, async (_, writer) => {
    for (let n = next++; n < WRITES; n = next++) {
      const server = servers[n % 2]
      const id = n % 40 // ids repeat: creates, replaces and deletes of the same plants race
      const name = `w${writer}-${n}`
      const op = (n * 7 + writer) % 5
      const answer = op === 4
        ? await call(server, 'DELETE', `/plants/${id}`)
        : op < 2 ? await call(server, 'POST', '/plants', { body: { id, name } }) : await call(server, 'PUT', `/plants/${id}`, { body: { name } })
      assert.ok([200, 204, 404, 409].includes(answer.status), `${answer.status} ${answer.text}`)
      const etag = answer.headers.get('etag')
      if (answer.status === 200 && etag !== null && answer.body.name === name) acknowledged.set(JSON.parse(etag) as string, name)
    }
  }))
  writing = false
  await reading

  const positions = seen.map(change => BigInt(change.position))
  t.diagnostic(`${positions.length} changes seen, ${acknowledged.size} of them acknowledged with an ETag`)
  assert.ok(positions.length > WRITES / 3, `${positions.length} changes seen`)
  assert.deepEqual(positions, positions.map((_, i) => BigInt(i + 1)), 'every position once, in order, none skipped')
  const byPosition = new Map(seen.map(change => [change.position, change.name]))
  for (const [position, name] of acknowledged) assert.equal(byPosition.get(position), name, `the acknowledged change at ${position}`)
})
