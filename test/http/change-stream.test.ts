// GET /plants/changes as Server-Sent Events, black box over real HTTP (SPEC section 9).
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { connect } from 'node:net'
import { describe, test } from 'node:test'
import { call, cli, isErrorBody, startServer, testStores, type Server } from '../helpers.js'
import { changeIn, openStream, type SseEvent } from '../sse.js'

const BIG = '9223372036854775807'
const sleep = async (ms: number): Promise<void> => await new Promise(resolve => setTimeout(resolve, ms))
const isChange = (event: SseEvent): boolean => event.event?.startsWith('plant.') === true

async function post (server: Server, id: number | string, name: string, tag?: string): Promise<void> {
  const raw = `{"id": ${id}, "name": ${JSON.stringify(name)}${tag === undefined ? '' : `, "tag": ${JSON.stringify(tag)}`}}`
  const answer = await call(server, 'POST', '/plants', { raw })
  assert.equal(answer.status, 200, answer.text)
}

/** The server's resident set, from /proc. */
function rssMiB (server: Server): number {
  const kib = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${server.process.pid}/status`, 'utf8'))![1]
  return Number(kib) / 1024
}

for (const store of testStores()) {
  describe(store, () => {
    test('a stream: headers, retry, each change as id, event and data, exact ids; resumed from Last-Event-ID', async (t) => {
      const server = await startServer(t, { store })
      await post(server, BIG, 'Fern', 'shade')
      const stream = await openStream(`${server.url}/plants/changes`, server.token)
      t.after(stream.close)
      assert.equal(stream.status, 200)
      assert.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8')
      assert.equal(stream.headers['cache-control'], 'no-store')
      assert.equal(stream.headers['x-accel-buffering'], 'no')
      const [first] = await stream.until(1, isChange)
      assert.equal(stream.retry, 1000)
      assert.equal(first.id, '1')
      assert.equal(first.event, 'plant.created')
      assert.match(first.data, new RegExp(`^\\{"position":1,"type":"plant.created","id":${BIG},"plant":\\{"id":${BIG},"name":"Fern","tag":"shade"\\},"at":"[^"]+"\\}$`))
      assert.equal((await call(server, 'PUT', `/plants/${BIG}`, { body: { name: 'Fern' } })).status, 200)
      await call(server, 'DELETE', `/plants/${BIG}`)
      const events = await stream.until(3, isChange)
      assert.deepEqual(events.map(event => [event.id, event.event, changeIn(event).plant]), [
        ['1', 'plant.created', { id: BIG, name: 'Fern', tag: 'shade' }],
        ['2', 'plant.updated', { id: BIG, name: 'Fern' }],
        ['3', 'plant.deleted', { id: BIG, name: 'Fern' }]
      ])

      const resumed = await openStream(`${server.url}/plants/changes?after=0`, server.token, { 'last-event-id': '2' })
      t.after(resumed.close)
      assert.deepEqual((await resumed.until(1, isChange)).map(event => event.id), ['3'], 'Last-Event-ID wins over after')
      // An empty last event id is none (an EventSource whose last id is empty sends no header): `after` decides.
      for (const empty of ['', ' ']) {
        const fromAfter = await openStream(`${server.url}/plants/changes?after=1`, server.token, { 'last-event-id': empty })
        t.after(fromAfter.close)
        assert.equal(fromAfter.status, 200, `Last-Event-ID ${JSON.stringify(empty)}`)
        assert.deepEqual((await fromAfter.until(2, isChange)).map(event => event.id), ['2', '3'])
      }
      for (const id of ['x', '01', '-1', '1.0', '9223372036854775808']) {
        const bad = await openStream(`${server.url}/plants/changes`, server.token, { 'last-event-id': id })
        t.after(bad.close)
        assert.equal(bad.status, 400, `Last-Event-ID ${id}`) // before waiting for its end: a stream opened by mistake never ends
        await bad.ended
        assert.equal(JSON.parse(bad.text()).error, 400)
      }
      const gone = await openStream(`${server.url}/plants/changes`, server.token, { 'last-event-id': '99' })
      await gone.ended
      assert.equal(gone.status, 410, 'a position the log never reached is a plain 410, not a stream')
      assert.equal(JSON.parse(gone.text()).error, 410)
      const anonymous = await openStream(`${server.url}/plants/changes`, null)
      await anonymous.ended
      assert.equal(anonymous.status, 401)
    })

    test('a filtered stream shows only its tag\'s changes and sends bookmarks past the others', async (t) => {
      const server = await startServer(t, { store })
      const isBookmark = (event: SseEvent): boolean => event.event === 'bookmark'
      const stream = await openStream(`${server.url}/plants/changes?tag=rare`, server.token)
      t.after(stream.close)
      // A reader that gave no position is told first where its stream starts.
      const [start] = await stream.until(1, isBookmark, 2500)
      assert.deepEqual([start.id, JSON.parse(start.data)], ['0', { position: 0 }])
      assert.equal(stream.events[0], start)
      for (let id = 1; id <= 5; id++) await post(server, id, 'plain')
      const bookmark = (await stream.until(2, isBookmark, 5000))[1]
      // Bookmarks go out at most once a second: this one marks the first of them passed.
      assert.ok(Number(bookmark.id) >= 1 && Number(bookmark.id) <= 5, `bookmark ${String(bookmark.id)}`)
      assert.deepEqual(JSON.parse(bookmark.data), { position: Number(bookmark.id) })
      await post(server, 6, 'rare', 'rare')
      const [shown] = await stream.until(1, isChange)
      assert.equal(shown.id, '6')
      // Passed over right after that write, with the stream caught up: bookmarked within about a second still, not at the next heartbeat (10 s).
      for (let id = 7; id <= 11; id++) await post(server, id, 'plain')
      const passed = performance.now()
      await stream.until(1, event => event.event === 'bookmark' && event.id === '11', 5000)
      assert.ok(performance.now() - passed < 2500, `bookmarked after ${Math.round(performance.now() - passed)} ms`)
      assert.equal(stream.events.filter(isChange).length, 1, 'the plain plants are not shown')
      // A reader that gave its position is not told it again, by `after` or by Last-Event-ID.
      const resumed = [await openStream(`${server.url}/plants/changes?tag=rare&after=11`, server.token), await openStream(`${server.url}/plants/changes?tag=rare`, server.token, { 'last-event-id': '11' })]
      for (const again of resumed) t.after(again.close)
      await sleep(1500)
      assert.deepEqual(resumed.map(again => again.events), [[], []])
    })
    test('a stream opened without a position is told first where it starts, the oldest change kept, filtered or not: resumed there once the log has dropped more, it is a 410, not a gap', async (t) => {
      // Changes older than the retention are dropped within 100 ms (a timer): 3 s leaves change 2 time to be read on a slow machine.
      const server = await startServer(t, { store, env: { CHANGES_RETENTION: '3s' } })
      await post(server, 1, 'Old')
      await sleep(3500) // change 1 dropped: the log keeps what follows position 1
      await post(server, 2, 'New')
      const streams = [await openStream(`${server.url}/plants/changes`, server.token), await openStream(`${server.url}/plants/changes?tag=rare`, server.token)]
      for (const stream of streams) t.after(stream.close)
      const [plain, filtered] = streams
      await plain.until(1, isChange)
      assert.deepEqual(plain.events.map(event => [event.id, event.event]), [['1', 'bookmark'], ['2', 'plant.created']])
      assert.deepEqual(JSON.parse(plain.events[0].data), { position: 1 })
      const [first] = await filtered.until(1, () => true, 2500)
      assert.deepEqual([first.id, first.event, JSON.parse(first.data)], ['1', 'bookmark', { position: 1 }])
      await sleep(3500) // change 2 dropped too
      for (const stream of streams) {
        const resumed = await openStream(`${server.url}/plants/changes`, server.token, { 'last-event-id': stream.events[0].id! })
        await resumed.ended
        assert.equal(resumed.status, 410, 'what followed its start was dropped: list again')
      }
    })
  })
}

// The rest runs on SQLite: the stream's bounds live in the server, whatever its store.
// Two at a time: most of these wait on timers (heartbeats, stalls, rechecks), not on the machine.
describe('stream bounds (SQLite)', { concurrency: 2 }, () => {
  test('a stream its client closes is logged as one request line (200) and one line of its end, which names no route or status: a pipeline counting lines by route counts it once', async (t) => {
    const server = await startServer(t)
    await post(server, 1, 'Fern')
    const stream = await openStream(`${server.url}/plants/changes`, server.token)
    await stream.until(1, isChange)
    stream.close()
    const lines = (): Array<Record<string, unknown>> => server.stdout().trim().split('\n').map(line => JSON.parse(line) as Record<string, unknown>)
    for (const deadline = Date.now() + 3000; !lines().some(line => line.msg === 'change stream ended') && Date.now() < deadline;) await sleep(50)
    const ended = lines().filter(line => line.msg === 'change stream ended')
    const requests = lines().filter(line => line.route === '/plants/changes')
    assert.equal(ended.length, 1)
    assert.deepEqual([ended[0].changes, ended[0].ended, typeof ended[0].durationMs], [1, 'client left', 'number'])
    assert.deepEqual(requests.map(line => [line.msg, line.status, line.reqId]), [['request', 200, ended[0].reqId]])
  })

  test('heartbeats: an idle stream gets a comment line within 15 s', { timeout: 20_000 }, async (t) => {
    const server = await startServer(t)
    const stream = await openStream(`${server.url}/plants/changes`, server.token)
    t.after(stream.close)
    const opened = performance.now()
    while (!stream.comments.some(comment => comment.text.startsWith(': heartbeat'))) {
      assert.ok(performance.now() - opened < 15_000, 'no heartbeat within 15 s')
      await sleep(100)
    }
  })

  test('heartbeats: a stream whose events never pause gets a comment line within 15 s all the same (SPEC: at least every 15 s)', { timeout: 20_000 }, async (t) => {
    const server = await startServer(t)
    const stream = await openStream(`${server.url}/plants/changes`, server.token)
    t.after(stream.close)
    const opened = performance.now()
    for (let id = 1; !stream.comments.some(comment => comment.text.startsWith(': heartbeat')); id++) {
      assert.ok(performance.now() - opened < 15_000, `no heartbeat within 15 s, among ${stream.events.length} events`)
      await post(server, id, 'plain')
      await sleep(250)
    }
    assert.ok(stream.events.length >= 30, `events kept coming: ${stream.events.length}`)
  })

  test('resume across a SIGKILL and a restart: no change missed, none repeated', { timeout: 60_000 }, async (t) => {
    const first = await startServer(t)
    const seen: string[] = []
    let last: string | undefined
    let server = first
    const follow = async (): Promise<void> => {
      const stream = await openStream(`${server.url}/plants/changes`, server.token, last === undefined ? {} : { 'last-event-id': last })
      assert.equal(stream.status, 200)
      let read = 0
      const collect = setInterval(() => {
        for (const event of stream.events.slice(read).filter(isChange)) { seen.push(event.id!); last = event.id }
        read = stream.events.length
      }, 5)
      await stream.ended
      clearInterval(collect)
      for (const event of stream.events.slice(read).filter(isChange)) { seen.push(event.id!); last = event.id }
    }
    let id = 0
    const writeSome = async (target: Server, count: number): Promise<void> => {
      for (let i = 0; i < count; i++) await post(target, ++id, `p${id}`)
    }
    const following = follow()
    await writeSome(server, 50)
    await sleep(100)
    server.process.kill('SIGKILL')
    await server.exited
    await following
    server = await startServer(t, { dir: first.dir, token: first.token })
    await writeSome(server, 50)
    const resumed = follow()
    await writeSome(server, 50)
    const deadline = Date.now() + 10_000
    while (seen.length < 150 && Date.now() < deadline) await sleep(20)
    server.process.kill('SIGKILL')
    await resumed
    assert.deepEqual(seen, Array.from({ length: 150 }, (_, i) => String(i + 1)))
  })

  test('a token revoked while its stream is open stops receiving within 5 s', async (t) => {
    const server = await startServer(t)
    const reader = cli(server, ['tokens', 'create', '--name', 'reader', '--scope', 'plants:read']).stdout.trim()
    const stream = await openStream(`${server.url}/plants/changes`, reader)
    assert.equal(stream.status, 200)
    await post(server, 1, 'before')
    await stream.until(1, isChange)
    assert.equal(cli(server, ['tokens', 'revoke', 'reader']).status, 0)
    const revoked = performance.now()
    await Promise.race([stream.ended, sleep(5000)])
    assert.ok(performance.now() - revoked < 5000, 'the stream ended within 5 s')
    await post(server, 2, 'after')
    await sleep(100)
    assert.equal(stream.events.filter(isChange).length, 1)
  })

  test('a token revoked while its stream is reading a backlog stops receiving within 5 s: the connection is cut, its buffers\' changes undelivered', { timeout: 90_000 }, async (t) => {
    const server = await startServer(t)
    const name = 'n'.repeat(200)
    const tag = 't'.repeat(100)
    const total = 10_000
    let next = 1
    await Promise.all(Array.from({ length: 16 }, async () => {
      for (let id = next++; id <= total; id = next++) await post(server, id, name, tag)
    }))
    const reader = cli(server, ['tokens', 'create', '--name', 'behind', '--scope', 'plants:read']).stdout.trim()
    // A reader far behind that reads 4 KiB every 20 ms (200 KiB a second): the backlog (about
    // 4.5 MB) would take it over 20 s, and the sockets' buffers alone hold seconds of it.
    const socket = connect(Number(new URL(server.url).port), '127.0.0.1')
    t.after(() => socket.destroy())
    socket.on('error', () => {}) // the reset
    const closed = new Promise(resolve => socket.once('close', resolve))
    socket.write(`GET /plants/changes?after=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${reader}\r\n\r\n`)
    socket.pause()
    let received = ''
    const pace = setInterval(() => {
      const chunk = socket.read(Math.min(4096, socket.readableLength)) as Buffer | null
      if (chunk !== null) received += chunk.toString('latin1')
    }, 20)
    t.after(() => clearInterval(pace))
    await sleep(1000)
    assert.equal(cli(server, ['tokens', 'revoke', 'behind']).status, 0)
    const revoked = performance.now()
    await Promise.race([closed, sleep(5000)])
    const took = performance.now() - revoked
    assert.ok(socket.destroyed, `the connection was cut within 5 s of the revocation (${took.toFixed(0)} ms)`)
    // The server's log line of the stream's end may come after the client saw the reset.
    const endedLine = /"changes":(\d+),"ended":"token no longer valid"/
    for (let waited = 0; !endedLine.test(server.stdout()) && waited < 2000; waited += 50) await sleep(50)
    const ended = endedLine.exec(server.stdout())
    assert.ok(ended !== null, 'the server logged why the stream ended')
    const delivered = received.match(/\nevent: plant\.created\n/g)?.length ?? 0
    assert.ok(delivered <= Number(ended[1]) && Number(ended[1]) < total, `${delivered} changes delivered, ${ended[1]} sent of ${total}`)
  })

  test('a token that expires while its stream is open stops receiving within 5 s of its expiry', async (t) => {
    const server = await startServer(t)
    const made = Date.now()
    const created = cli(server, ['tokens', 'create', '--name', 'brief', '--scope', 'plants:read', '--expires-in', '6s'])
    assert.equal(created.status, 0, created.stderr)
    const expiresBy = Date.now() + 6000
    const stream = await openStream(`${server.url}/plants/changes`, created.stdout.trim())
    assert.equal(stream.status, 200)
    await post(server, 1, 'before')
    await stream.until(1, isChange)
    await Promise.race([stream.ended, sleep(expiresBy + 5000 - Date.now())])
    const ended = Date.now()
    assert.ok(ended < expiresBy + 5000, 'the stream ended within 5 s of the expiry')
    assert.ok(ended >= made + 6000, `not before the expiry: ${ended - made} ms after the token was made`)
    await post(server, 2, 'after')
    await sleep(100)
    assert.equal(stream.events.filter(isChange).length, 1)
  })

  test('past CHANGES_MAX_READERS, streams and waiting polls are refused with 503 and Retry-After; a place freed is taken again', async (t) => {
    const server = await startServer(t, { env: { CHANGES_MAX_READERS: '2' } })
    const one = await openStream(`${server.url}/plants/changes`, server.token)
    const two = await openStream(`${server.url}/plants/changes`, server.token)
    const three = await openStream(`${server.url}/plants/changes`, server.token)
    await three.ended
    assert.equal(three.status, 503)
    assert.equal(three.headers['retry-after'], '1')
    assert.equal(JSON.parse(three.text()).error, 503)
    const poll = await call(server, 'GET', '/plants/changes?wait=5')
    assert.ok(isErrorBody(poll, 503), poll.text)
    assert.equal((await call(server, 'GET', '/plants/changes')).status, 200, 'a read that does not wait takes no place')
    one.close()
    await sleep(200)
    const again = await openStream(`${server.url}/plants/changes`, server.token)
    assert.equal(again.status, 200)
    again.close()
    two.close()
    await sleep(150)
    assert.doesNotMatch(server.stdout(), /"level":50/, 'a reader cap reached is an answer, not an error: no "request failed" line')
    assert.match(server.stdout(), /"status":503[^\n]*"msg":"request"/, 'the 503s are in the request lines')
  })

  test('SIGTERM with streams and a long poll open: the process exits within SHUTDOWN_TIMEOUT, the streams end', async (t) => {
    const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '3' } })
    const streams = await Promise.all([1, 2, 3].map(async () => await openStream(`${server.url}/plants/changes`, server.token)))
    const poll = call(server, 'GET', '/plants/changes?wait=60').catch((error: Error) => error)
    await sleep(200)
    const started = performance.now()
    server.process.kill('SIGTERM')
    assert.equal(await server.exited, 0)
    const took = performance.now() - started
    assert.ok(took < 3000, `exited ${took.toFixed(0)} ms after SIGTERM`)
    await Promise.all(streams.map(async stream => await stream.ended))
    const answered = await poll
    assert.ok(!(answered instanceof Error) && answered.status === 200, 'the long poll is answered with what it has')
  })

  test('a reader that stops reading while 10,000 changes are written is closed; memory stays bounded and another reader keeps up', { timeout: 90_000 }, async (t) => {
    const server = await startServer(t)
    // The stalled reader: a raw socket that sends the request and never reads a byte.
    const stalled = connect(Number(new URL(server.url).port), '127.0.0.1')
    t.after(() => stalled.destroy())
    stalled.write(`GET /plants/changes HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${server.token}\r\n\r\n`)
    stalled.pause()
    const reader = await openStream(`${server.url}/plants/changes`, server.token)
    t.after(reader.close)
    await sleep(200)
    const before = rssMiB(server)
    let peak = before
    const sampler = setInterval(() => { peak = Math.max(peak, rssMiB(server)) }, 50)
    t.after(() => clearInterval(sampler))
    const name = 'n'.repeat(200)
    const tag = 't'.repeat(100)
    let next = 0
    await Promise.all(Array.from({ length: 16 }, async () => {
      for (let id = next++; id < 10_000; id = next++) await post(server, id, name, tag)
    }))
    await reader.until(10_000, isChange, 30_000)
    const deadline = Date.now() + 20_000
    while (!server.stdout().includes('"ended":"reader stalled"') && Date.now() < deadline) await sleep(100)
    clearInterval(sampler)
    assert.match(server.stdout(), /"ended":"reader stalled"/, 'the stalled reader\'s stream was closed')
    assert.ok(peak - before < 64, `RSS grew ${(peak - before).toFixed(1)} MiB (from ${before.toFixed(1)} to ${peak.toFixed(1)})`)
    assert.deepEqual(reader.events.filter(isChange).map(event => Number(event.id)), Array.from({ length: 10_000 }, (_, i) => i + 1))

    // A second reader that stops reading, from the start of these 10,000 changes: its buffer fills
    // at once. SIGTERM drops its stream then, rather than leaving it to hold the stop for the
    // deadline (SHUTDOWN_TIMEOUT 10 s: the connections still open are closed at 9 s).
    const second = connect(Number(new URL(server.url).port), '127.0.0.1')
    t.after(() => second.destroy())
    second.write(`GET /plants/changes?after=0 HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer ${server.token}\r\n\r\n`)
    second.pause()
    await sleep(1000)
    const signalled = performance.now()
    server.process.kill('SIGTERM')
    assert.equal(await server.exited, 0)
    const took = performance.now() - signalled
    assert.ok(took < 3000, `exited ${took.toFixed(0)} ms after SIGTERM, with a stream whose reader does not read`)
  })
})

test('Accept decides between the stream and JSON by its q-values (RFC 9110 12.5.1)', { timeout: 20_000 }, async (t) => {
  const server = await startServer(t)
  await post(server, 1, 'Fern')
  for (const accept of ['text/event-stream;q=0', 'application/json;q=0.9, text/event-stream;q=0.1', '*/*', 'text/*', 'application/json', 'text/event-stream;q=0.5, */*']) {
    const answer = await call(server, 'GET', '/plants/changes', { headers: { accept } })
    assert.equal(answer.status, 200, accept)
    assert.match(answer.headers.get('content-type') ?? '', /^application\/json/, accept)
    assert.equal(answer.headers.get('vary'), 'Accept', 'caches keep JSON and the stream apart')
    assert.equal(answer.body.length, 1, accept)
  }
  for (const accept of ['text/event-stream', 'text/event-stream, application/json', 'application/json;q=0.5, Text/Event-Stream', 'text/event-stream;q=0.8, application/*;q=0.7']) {
    const stream = await openStream(`${server.url}/plants/changes`, server.token, { accept })
    t.after(stream.close)
    assert.equal(stream.headers['content-type'], 'text/event-stream; charset=utf-8', accept)
    assert.equal(stream.headers.vary, 'Accept')
    stream.close()
  }
  // HEAD answers the head its GET would: the stream's headers, no Content-Length, no reader's place
  // taken (the cap is 1 and a stream is open); a position gone is 410 alike.
  const capped = await startServer(t, { env: { CHANGES_MAX_READERS: '1' } })
  const open = await openStream(`${capped.url}/plants/changes`, capped.token)
  t.after(open.close)
  for (const accept of ['text/event-stream', 'application/json']) {
    const head = await call(capped, 'HEAD', '/plants/changes', { headers: { accept } })
    const get = accept === 'application/json' ? await call(capped, 'GET', '/plants/changes', { headers: { accept } }) : undefined
    assert.equal(head.status, 200, accept)
    assert.equal(head.text, '')
    assert.equal(head.headers.get('vary'), 'Accept')
    if (get === undefined) {
      assert.equal(head.headers.get('content-type'), open.headers['content-type'])
      assert.equal(head.headers.get('cache-control'), 'no-store')
      assert.equal(head.headers.get('content-length'), null, 'a stream has no length')
    } else {
      assert.equal(head.headers.get('content-type'), get.headers.get('content-type'))
      assert.equal(head.headers.get('content-length'), get.headers.get('content-length'))
    }
  }
  assert.equal((await call(capped, 'HEAD', '/plants/changes?after=99', { headers: { accept: 'text/event-stream' } })).status, 410, 'beyond the head')
  // A HEAD of a long poll never waits either, and the cap (1, a stream open) does not refuse it.
  const started = performance.now()
  const polled = await call(capped, 'HEAD', '/plants/changes?after=0&wait=5')
  assert.equal(polled.status, 200, polled.text)
  assert.ok(performance.now() - started < 2000, `answered after ${(performance.now() - started).toFixed(0)} ms`)
  assert.equal(polled.headers.get('link'), '</plants/changes?after=0&wait=5>; rel="next"', 'nothing new: the next page is from the same position')
})
