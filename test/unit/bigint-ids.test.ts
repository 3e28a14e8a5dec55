import assert from 'node:assert/strict'
import { test } from 'node:test'
import { buildApp } from '../../src/app.js'
import { ALL_SCOPES, type PlantRecord, type Store } from '../../src/store/store.js'
import { digestOf } from '../../src/tokens.js'

const TOKEN = `pst_${'b'.repeat(43)}`

/** A store that records the type of every id it is handed, and answers as if every plant existed. */
function recordingStore (seen: Array<[string, string]>): Store {
  const token = { record: { id: 1, name: 'test', scopes: ALL_SCOPES, createdAt: new Date() }, digest: digestOf(TOKEN) }
  const plant = (id: bigint): PlantRecord => ({ id, name: 'Fern' })
  return {
    findToken: async () => token,
    create: async (record: PlantRecord) => { seen.push(['create', typeof record.id]); return { outcome: 'created', version: 1n } },
    get: async (id: bigint) => { seen.push(['get', typeof id]); return { plant: plant(id), version: 1n } },
    list: async ({ after }: { after?: bigint }) => { seen.push(['list', typeof after]); return { plants: [], position: 0n } },
    replace: async (id: bigint) => { seen.push(['replace', typeof id]); return { plant: plant(id), version: 2n } },
    remove: async (id: bigint) => { seen.push(['remove', typeof id]); return { position: 3n } }
  } as unknown as Store
}

test('ids reach the store as bigint, whatever their size, from bodies, paths and queries alike', async (t) => {
  const seen: Array<[string, string]> = []
  const app = await buildApp({ config: { logLevel: 'silent', rateLimitPerMinute: 0, requestTimeout: 10 }, store: recordingStore(seen) })
  t.after(() => app.close())
  const headers = { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }
  for (const id of ['0', '7', '-7', '9007199254740993', '-9223372036854775808', '9223372036854775807']) {
    seen.length = 0
    const answers = await Promise.all([
      app.inject({ method: 'POST', url: '/plants', headers, payload: `{"id": ${id}, "name": "Fern"}` }),
      app.inject({ method: 'GET', url: `/plants/${id}`, headers }),
      app.inject({ method: 'GET', url: `/plants?after=${id}`, headers }),
      app.inject({ method: 'PUT', url: `/plants/${id}`, headers, payload: '{"name": "Fern"}' }),
      app.inject({ method: 'DELETE', url: `/plants/${id}`, headers })
    ])
    assert.deepEqual(answers.map(answer => answer.statusCode), [200, 200, 200, 200, 204], id)
    assert.deepEqual(seen.sort(), [['create', 'bigint'], ['get', 'bigint'], ['list', 'bigint'], ['remove', 'bigint'], ['replace', 'bigint']], id)
    assert.match(answers[1].body, new RegExp(`"id":${id}[,}]`), 'the id is written back digit for digit')
  }
})
