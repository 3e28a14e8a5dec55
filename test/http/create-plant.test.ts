import Database from 'better-sqlite3'
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { call, isErrorBody, startServer, type Server } from '../helpers.js'

function storedRows (server: Server): Array<{ id: bigint, name: string, tag: string | null }> {
  const db = new Database(server.dbPath, { readonly: true })
  try {
    return db.prepare('SELECT id, name, tag FROM plants ORDER BY id').safeIntegers(true).all() as Array<{ id: bigint, name: string, tag: string | null }>
  } finally {
    db.close()
  }
}

test('POST /plants', async (t) => {
  const server = await startServer(t)

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
      const row = storedRows(server).find(r => r.name === `edge ${id}`)
      assert.equal(row?.id, BigInt(id), `stored ${id}`)
      const read = await call(server, 'GET', `/plants/${id}`)
      assert.equal(read.text, `{"id":${id},"name":"edge ${id}"}`)
    }
  })

  await t.test('a repeated POST with the same body is 200 and changes nothing', async () => {
    const before = storedRows(server)
    const answer = await call(server, 'POST', '/plants', { body: { id: 7, name: 'Fern', tag: 'shade' } })
    assert.equal(answer.status, 200)
    assert.equal(answer.text, '{"name":"Fern","tag":"shade"}')
    assert.deepEqual(storedRows(server), before)
  })

  await t.test('a repeated id with a different name, tag or missing tag is 409 and changes nothing', async () => {
    const before = storedRows(server)
    for (const body of [{ id: 7, name: 'Other', tag: 'shade' }, { id: 7, name: 'Fern', tag: 'sun' }, { id: 7, name: 'Fern' }, { id: 8, name: 'Moss', tag: 'x' }]) {
      const answer = await call(server, 'POST', '/plants', { body })
      assert.ok(isErrorBody(answer, 409), JSON.stringify(body) + ' ' + answer.text)
    }
    assert.deepEqual(storedRows(server), before)
  })

  await t.test('every invalid body is 400 with the Error body and stores nothing', async () => {
    const before = storedRows(server)
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
      ['tag 101 characters', JSON.stringify({ id: 101, name: 'x', tag: 't'.repeat(101) })]
    ]
    for (const [why, raw] of invalid) {
      const answer = await call(server, 'POST', '/plants', { raw, headers: { 'content-type': 'application/json' } })
      assert.ok(isErrorBody(answer, 400), `${why}: ${answer.status} ${answer.text}`)
    }
    assert.deepEqual(storedRows(server), before)
  })

  await t.test('the limits themselves are accepted: 200-character name, 100-character tag', async () => {
    const answer = await call(server, 'POST', '/plants', { body: { id: 102, name: 'n'.repeat(200), tag: 't'.repeat(100) } })
    assert.equal(answer.status, 200)
  })

  await t.test('messages name the field and say what is wrong', async () => {
    assert.equal((await call(server, 'POST', '/plants', { body: { name: 'x' } })).body.message, '`id` in the request body is required.')
    assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: '' } })).body.message, '`name` in the request body must not be empty.')
  })
})
