// A change stream waits, again and again, for the head to move and for its reader to make room:
// each wait must take its listeners with it. A stream open for hours passes millions of changes;
// anything left behind per wait (a listener, a reaction on a promise that lives as long as the
// stream) grows without bound.
import assert from 'node:assert/strict'
import { EventEmitter } from 'node:events'
import type { ServerResponse } from 'node:http'
import { test } from 'node:test'
import v8 from 'node:v8'
import vm from 'node:vm'
import pino from 'pino'
import { Feed } from '../../src/changes/feed.js'
import { untilClosed, writeWhenRoom } from '../../src/changes/stream.js'
import type { Store } from '../../src/store/store.js'

/** A response whose socket's buffer is always full: every write waits for a drain. */
function fullResponse (): ServerResponse & EventEmitter {
  const res = new EventEmitter() as ServerResponse & EventEmitter
  Object.assign(res, { destroyed: false, write: () => false, destroy: () => { Object.assign(res, { destroyed: true }); res.emit('close') } })
  return res
}

const feed = (): Feed => new Feed({ store: {} as Store, maxReaders: 10, log: pino({ level: 'silent' }) })

test('waiting for the head, 1,000 times: no listener is left on the response', async () => {
  const res = fullResponse()
  for (let i = 0; i < 1000; i++) await untilClosed(res, Promise.resolve())
  assert.equal(res.listenerCount('close'), 0)
  const closing = untilClosed(res, new Promise(() => {}))
  res.emit('close')
  await closing // the response's close ends a wait whose work never settles
})

test('waiting for the head 20,000 times on one stream keeps nothing (a race with a promise that lives as long as the stream kept ~300 bytes a wait)', async () => {
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc') as () => void
  const res = fullResponse()
  await untilClosed(res, Promise.resolve())
  gc()
  const before = process.memoryUsage().heapUsed
  for (let i = 0; i < 20_000; i++) await untilClosed(res, Promise.resolve())
  gc()
  const grown = process.memoryUsage().heapUsed - before
  assert.ok(grown < 1024 * 1024, `the heap grew by ${Math.round(grown / 1024)} KiB over 20,000 waits`)
})

test('waiting for room, 1,000 times: no listener is left on the response nor on the feed; a stop ends the wait', async () => {
  const res = fullResponse()
  const stopping = feed()
  let stopListeners = 0
  const counting = { whenStopped: (listener: () => void) => { stopListeners++; const forget = stopping.whenStopped(listener); return () => { stopListeners--; forget() } } }
  for (let i = 0; i < 1000; i++) {
    const written = writeWhenRoom(res, 'data\n\n', counting)
    res.emit('drain')
    assert.equal(await written, true)
  }
  assert.deepEqual([res.listenerCount('drain'), res.listenerCount('close'), stopListeners], [0, 0, 0])
  const waiting = writeWhenRoom(res, 'data\n\n', counting)
  stopping.close()
  assert.equal(await waiting, false, 'the server stopping ends the wait')
  assert.equal(res.destroyed, true, 'and drops the stream')
})
