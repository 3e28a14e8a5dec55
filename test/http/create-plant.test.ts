import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { call, isErrorBody, startServer, testStores } from '../helpers.js'
import { plantsBySql, storedPlants } from '../stored.js'

for (const store of testStores()) {
  describe(store, () => {
    test('POST /plants', async (t) => {
      const server = await startServer(t, { store })

      await t.test('answers 200 with the plant and without its id', async () => {
        const answer = await call(server, 'POST', '/plants', { body: { id: 7, name: 'Fern', tag: 'shade' } })
        assert.equal(answer.status, 200)
        assert.equal(answer.text, '{"name":"Fern","tag":"shade"}')
        assert.match(answer.headers.get('content-type') ?? '', /^application\/json/)
      })

      await t.test('answers a plant without a tag without one', async () => {
        const answer = await call(server, 'POST', '/plants', { body: { id: 8, name: 'Moss' } })
        assert.equal(answer.status, 200)
        assert.equal(answer.text, '{"name":"Moss"}')
      })

      await t.test('ignores unknown fields: not stored, not echoed', async () => {
        const answer = await call(server, 'POST', '/plants', { body: { id: 9, name: 'Ivy', colour: 'green' } })
        assert.equal(answer.text, '{"name":"Ivy"}')
        const got = await call(server, 'GET', '/plants/9')
        assert.deepEqual(got.body, { id: 9, name: 'Ivy' })
      })

      await t.test('stores the int64 extremes exactly, and answers them back', async () => {
        for (const id of ['9223372036854775807', '-9223372036854775808', '9007199254740993', '0']) {
          const answer = await call(server, 'POST', '/plants', { raw: `{"id": ${id}, "name": "edge ${id}"}` })
          assert.equal(answer.status, 200, id)
          const row = (await plantsBySql(server)).find(r => r.name === `edge ${id}`)
          assert.equal(row?.id, BigInt(id), `stored ${id}, as the database itself holds it`)
          const read = await call(server, 'GET', `/plants/${id}`)
          assert.equal(read.text, `{"id":${id},"name":"edge ${id}"}`)
        }
      })

      await t.test('a repeated POST with the same body is 200 and changes nothing', async () => {
        const before = await storedPlants(server)
        const answer = await call(server, 'POST', '/plants', { body: { id: 7, name: 'Fern', tag: 'shade' } })
        assert.equal(answer.status, 200)
        assert.equal(answer.text, '{"name":"Fern","tag":"shade"}')
        assert.deepEqual(await storedPlants(server), before)
      })

      await t.test('a repeated id with a different name, tag or missing tag is 409 and changes nothing', async () => {
        const before = await storedPlants(server)
        for (const body of [{ id: 7, name: 'Other', tag: 'shade' }, { id: 7, name: 'Fern', tag: 'sun' }, { id: 7, name: 'Fern' }, { id: 8, name: 'Moss', tag: 'x' }]) {
          const answer = await call(server, 'POST', '/plants', { body })
          assert.ok(isErrorBody(answer, 409), JSON.stringify(body) + ' ' + answer.text)
          assert.match(answer.body.message, /^A plant with this id is stored already, with other data/, 'the same plant, other data: not "another plant"')
        }
        assert.deepEqual(await storedPlants(server), before)
      })

      await t.test('every invalid body is 400 with the Error body and stores nothing', async () => {
        const before = await storedPlants(server)
        const invalid: Array<[string, string]> = [
          ['no body', ''],
          ['whitespace', '   '],
          ['not JSON', 'plant please'],
          ['truncated JSON', '{"id": 1, "name": "x"'],
          ['an array', '[{"id": 1, "name": "x"}]'],
          ['a string', '"plant"'],
          ['a number', '42'],
          ['null', 'null'],
          ['missing id', '{"name": "x"}'],
          ['missing name', '{"id": 100}'],
          ['empty object', '{}'],
          ['id as a string', '{"id": "100", "name": "x"}'],
          ['id fractional', '{"id": 1.5, "name": "x"}'],
          ['id true', '{"id": true, "name": "x"}'],
          ['id null', '{"id": null, "name": "x"}'],
          ['id an object', '{"id": {}, "name": "x"}'],
          ['id above int64', '{"id": 9223372036854775808, "name": "x"}'],
          ['id below int64', '{"id": -9223372036854775809, "name": "x"}'],
          ['id huge exponent', '{"id": 1e300, "name": "x"}'],
          ['id fraction hidden by doubles', '{"id": 9007199254740993.5, "name": "x"}'],
          ['name a number', '{"id": 101, "name": 5}'],
          ['name null', '{"id": 101, "name": null}'],
          ['name empty', '{"id": 101, "name": ""}'],
          ['name 201 characters', JSON.stringify({ id: 101, name: 'n'.repeat(201) })],
          ['tag null', '{"id": 101, "name": "x", "tag": null}'],
          ['tag a number', '{"id": 101, "name": "x", "tag": 1}'],
          ['tag 101 characters', JSON.stringify({ id: 101, name: 'x', tag: 't'.repeat(101) })],
          // Characters are code points, not UTF-16 units: 🌿 is one character, two units.
          ['name 201 characters beyond the BMP', JSON.stringify({ id: 101, name: '🌿'.repeat(201) })],
          ['tag 101 characters beyond the BMP', JSON.stringify({ id: 101, name: 'x', tag: '🌿'.repeat(101) })]
        ]
        for (const [why, raw] of invalid) {
          const answer = await call(server, 'POST', '/plants', { raw, headers: { 'content-type': 'application/json' } })
          assert.ok(isErrorBody(answer, 400), `${why}: ${answer.status} ${answer.text}`)
        }
        assert.deepEqual(await storedPlants(server), before)
      })

      await t.test('the limits themselves are accepted: 200-character name, 100-character tag, counted in code points', async () => {
        const answer = await call(server, 'POST', '/plants', { body: { id: 102, name: 'n'.repeat(200), tag: 't'.repeat(100) } })
        assert.equal(answer.status, 200)
        const wide = { id: 103, name: '🌿'.repeat(200), tag: '🌿'.repeat(100) }
        assert.equal((await call(server, 'POST', '/plants', { body: wide })).status, 200)
        assert.deepEqual((await call(server, 'GET', '/plants/103')).body, wide, 'stored whole')
      })

      await t.test('messages name the field and say what is wrong', async () => {
        assert.equal((await call(server, 'POST', '/plants', { body: { name: 'x' } })).body.message, '`id` in the request body is required.')
        assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: '' } })).body.message, '`name` in the request body must not be empty.')
        // No body at all, with or without a content type: the same complaint, not "must be a JSON object".
        assert.equal((await call(server, 'POST', '/plants')).body.message, 'The request has no body; send a JSON object, as application/json.')
        assert.equal((await call(server, 'POST', '/plants', { raw: '' })).body.message, 'The request body is empty; send a JSON object.')
        assert.equal((await call(server, 'POST', '/plants', { raw: '[]' })).body.message, 'The request body must be a JSON object.')
      })
    })

    test('U+0000 in a name or tag: SQLite stores it exactly; PostgreSQL text cannot hold it, so it is the client\'s 400 there, storing nothing', async (t) => {
      const server = await startServer(t, { store })
      for (const [id, raw] of [[5, '{"id": 5, "name": "a\\u0000b"}'], [6, '{"id": 6, "name": "x", "tag": "\\u0000"}']] as const) {
        const answer = await call(server, 'POST', '/plants', { raw })
        if (store === 'sqlite') {
          assert.equal(answer.status, 200, answer.text)
          assert.equal((await call(server, 'GET', `/plants/${id}`)).text, raw.replace(/ /g, ''))
        } else {
          assert.ok(isErrorBody(answer, 400), `${raw}: ${answer.status} ${answer.text}`)
        }
      }
      assert.deepEqual((await storedPlants(server)).map(p => p.id), store === 'sqlite' ? [5n, 6n] : [])
      const filtered = await call(server, 'GET', '/plants?tag=%00')
      assert.equal(filtered.status, 200, 'a filter no tag can match is an empty page, not a failure')
      assert.deepEqual(filtered.body.map((p: { id: number }) => p.id), store === 'sqlite' ? [6] : [])
    })
  })
}
