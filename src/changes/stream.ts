import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import type { StillAllowed } from '../auth.js'
import type { Change, ChangesPage, Store } from '../store/store.js'
import type { Feed } from './feed.js'

/** A comment line at least this often, so that proxies and load balancers keep an idle stream open (SPEC: at least every 15 s). */
export const HEARTBEAT_MS = 10_000
/** How often a stream asks whether its token still holds, whatever it is doing: a revoked one stops receiving within this plus the token cache's second. */
export const RECHECK_MS = 2000
/** How long a reader may leave a full socket buffer unread before its stream is closed: it resumes with Last-Event-ID. */
export const STALL_MS = 10_000
/** Changes a stream reads from the store at once: the most it holds in memory beyond the socket's buffer. */
const STREAM_PAGE = 100
/** What an EventSource waits before reconnecting, in ms. */
const RETRY_MS = 1000
/** How long after its last write a filtered stream tells of the changes it passed over (a bookmark): at most once this often, and no later. */
const BOOKMARK_MS = 1000

/** A change as the feed shows it, in JSON and in a stream's `data:`. */
export function changeOf ({ position, type, plant, at }: Change): { position: bigint, type: string, id: bigint, plant: Change['plant'], at: Date } {
  return { position, type, id: plant.id, plant, at }
}

/** One event; `data` is JSON text. */
function event (id: bigint, type: string, data: string): string {
  return `id: ${id}\nevent: ${type}\ndata: ${data}\n\n`
}

/** Tells a filtered stream's reader that it has seen everything up to `position`. */
const bookmark = (position: bigint): string => event(position, 'bookmark', `{"position":${position}}`)

export interface StreamOptions {
  request: FastifyRequest
  reply: FastifyReply
  store: Store
  feed: Feed
  stillAllowed: StillAllowed
  log: Logger
  tag?: string
  /** The first page, read before the stream was admitted (so that a gone position is a plain 410). */
  first: Exclude<ChangesPage, 'gone'>
  /** The position the reader gave (`after`, Last-Event-ID), if any: it needs no bookmark of it. One that gave none is told first where its stream starts (`first.from`). */
  given?: bigint
  /** A change as JSON text: the JSON feed's serializer, from the document's `Change` schema. */
  serialize: (change: ReturnType<typeof changeOf>) => string
}

/** The head of every stream (and of a HEAD that asks for one). */
export const STREAM_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-store',
  'x-accel-buffering': 'no' // nginx would otherwise hold the events back in its buffer
} as const

/**
 * Serves the change log as Server-Sent Events until the client leaves, the token no longer
 * holds, the reader stalls, the log drops what the stream was about to read, or the server stops.
 * Reads a page at a time and writes it only while the socket takes it: a reader that stops
 * reading costs one page and the socket's buffer, then is closed.
 */
export async function streamChanges ({ request, reply, store, feed, stillAllowed, log, tag, first, given, serialize }: StreamOptions): Promise<void> {
  reply.hijack()
  const res = reply.raw
  // The headers set so far (CORS's) go out with the stream's own.
  for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) res.setHeader(name, value)
  res.writeHead(200, STREAM_HEADERS)
  let left = false
  res.once('close', () => { left = true })
  const started = performance.now()
  let sent = 0
  /** Why the stream ended: the first cause found. */
  let why: string | undefined
  // A reader far behind waits on its socket, not on the log, for seconds at a time: the token is
  // asked on a timer of its own. Once it no longer holds, the connection is reset, so that what the
  // socket's buffers hold is not delivered either; the reader's reconnection gets the 401.
  const stopAsking = askAgainAndAgain(async () => await stillAllowed(request, 'plants:read'), () => {
    why ??= 'token no longer valid'
    try {
      res.socket?.resetAndDestroy()
    } catch {
      res.destroy() // a connection that cannot be reset (not TCP) is closed
    }
  })
  try {
    let page = first
    let lastId = given ?? first.from
    let lastWrite = performance.now()
    let lastBeat = performance.now()
    /** True when the filter has passed over changes up to `next` since the last event or bookmark. */
    const owed = (next: bigint): boolean => tag !== undefined && next !== lastId
    /**
     * What goes out now beside the changes, counted as sent (a write that fails ends the stream): a
     * comment line when one is due (at least every HEARTBEAT_MS, events or not), and, for changes
     * passed over by the filter, a bookmark, so that a resume starts past them, never at a
     * position the log may have dropped.
     */
    const extras = (next: bigint, now: number): string => {
      let text = ''
      if (now - lastBeat >= HEARTBEAT_MS) {
        text += ': heartbeat\n\n'
        lastBeat = now
      }
      if (owed(next) && now - lastWrite >= BOOKMARK_MS) {
        text += bookmark(next)
        lastId = next
      }
      return text
    }
    /** Writes `text`, if any; false when it did not go through, which ends the stream (`why` says why). */
    const send = async (text: string): Promise<boolean> => {
      if (text === '') return true
      if (!await writeWhenRoom(res, text, feed)) {
        why ??= left ? 'client left' : feed.closing ? 'server stopping' : 'reader stalled'
        return false
      }
      lastWrite = performance.now()
      return true
    }
    // A reader that gave no position learns where it starts before anything else: resumed from
    // there, it gets a 410 if the log dropped what followed, never a silent gap.
    if (!await send(`retry: ${RETRY_MS}\n\n${given === undefined ? bookmark(first.from) : ''}`)) return
    for (;;) {
      const events = page.changes.map(change => event(change.position, change.type, serialize(changeOf(change)))).join('')
      if (page.changes.length > 0) lastId = page.changes[page.changes.length - 1].position
      if (!await send(events + extras(page.next, performance.now()))) return
      sent += page.changes.length
      // Caught up: wait for the head to move, the bookmark still owed, or a heartbeat.
      while (!feed.past(page.next)) {
        if (left) return
        if (feed.closing) { why ??= 'server stopping'; return }
        if (!await send(extras(page.next, performance.now()))) return
        const later = performance.now()
        const bookmarkDue = owed(page.next) ? BOOKMARK_MS - (later - lastWrite) : Infinity
        const wait = Math.min(HEARTBEAT_MS - (later - lastBeat), bookmarkDue)
        await untilClosed(res, feed.beyond(page.next, Math.max(1, wait)))
      }
      if (left) return
      const next = await store.changes({ after: page.next, limit: STREAM_PAGE, tag })
      if (next === 'gone') { why ??= 'position dropped from the log'; return }
      page = next
    }
  } catch (error) {
    why ??= `store unavailable: ${(error as Error).message}`
  } finally {
    stopAsking()
    // What the reader has not read yet it will read again from Last-Event-ID: a stream whose buffer
    // is full is dropped, not ended, so that it does not hold its connection (and a stop) any longer.
    if (res.writableNeedDrain) res.destroy()
    else if (!res.destroyed) res.end()
    // Its request's own line (the same reqId) says the method, route and status: this one does not, so that it is not counted twice.
    log.info({ reqId: request.id, durationMs: Math.round(performance.now() - started), changes: sent, ended: why ?? 'client left' }, 'change stream ended')
  }
}

/**
 * Asks `holds` every RECHECK_MS, one question at a time, until it answers false (then calls
 * `gone`) or the returned function is called. A question that fails (the store cannot tell) is
 * taken for yes: an outage does not end streams.
 */
function askAgainAndAgain (holds: () => Promise<boolean>, gone: () => void): () => void {
  let stopped = false
  let timer: NodeJS.Timeout | undefined
  const ask = (): void => {
    timer = setTimeout(async () => {
      const yes = await holds().catch(() => true)
      if (stopped) return
      if (yes) ask()
      else gone()
    }, RECHECK_MS)
  }
  ask()
  return () => {
    stopped = true
    clearTimeout(timer)
  }
}

/**
 * `work`, or the response's close if that comes first. Its listener goes with the call: a race
 * with one promise that lives as long as the stream would keep a reaction on it for every call.
 */
export async function untilClosed (res: ServerResponse, work: Promise<unknown>): Promise<void> {
  await new Promise<void>(resolve => {
    const done = (): void => {
      res.off('close', done)
      resolve()
    }
    res.once('close', done)
    work.then(done, done)
  })
}

/**
 * Writes `text`, waiting while the socket's buffer is full: false if the client left, the server
 * stops, or the client did not read for STALL_MS (then the connection is closed). Each wait's
 * listeners and timer go with it.
 */
export async function writeWhenRoom (res: ServerResponse, text: string, feed: Pick<Feed, 'whenStopped'>): Promise<boolean> {
  if (res.destroyed) return false
  if (res.write(text)) return true
  const drained = await new Promise<boolean>(resolve => {
    let forgetStop = (): void => {}
    const settle = (value: boolean) => (): void => {
      clearTimeout(timer)
      res.off('drain', onDrain)
      res.off('close', onEnd)
      forgetStop()
      resolve(value)
    }
    const onDrain = settle(true)
    const onEnd = settle(false)
    const timer = setTimeout(onEnd, STALL_MS)
    res.once('drain', onDrain)
    res.once('close', onEnd)
    forgetStop = feed.whenStopped(onEnd)
  })
  if (!drained) res.destroy()
  return drained
}
