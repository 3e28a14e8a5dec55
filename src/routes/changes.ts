import type { FastifyPluginAsync } from 'fastify'
import type { Logger } from 'pino'
import type { StillAllowed } from '../auth.js'
import type { Feed } from '../changes/feed.js'
import { changeOf, STREAM_HEADERS, streamChanges } from '../changes/stream.js'
import { route } from '../contract.js'
import { ApiError, unroutedRefusal } from '../errors.js'
import type { ChangesPage, Store } from '../store/store.js'
import { linkTo } from './links.js'
import { varyAlsoOn } from './vary.js'

const LIST_CHANGES = route('listChanges')
/** One change as the document's `Change` schema writes it: each event of a stream, as the JSON feed's items. */
const CHANGE_SCHEMA = (LIST_CHANGES.schema.response as Record<string, { items: Record<string, unknown> }>)['200'].items

/** A page of the log, or the 410 when the log no longer holds what follows `after`. */
async function pageAfter (store: Store, query: { after?: bigint, limit: number, tag?: string }): Promise<Exclude<ChangesPage, 'gone'>> {
  const page = await store.changes(query)
  if (page === 'gone') throw new ApiError('changesGone')
  return page
}

/** The position in a Last-Event-ID header: plain decimal digits, an int64; none when empty, as an EventSource whose last id is empty sends none. */
function eventIdOf (header: string | undefined): bigint | undefined {
  const digits = header?.trim() ?? ''
  if (digits === '') return undefined
  // Plain decimal, one way, as every number in a query: no leading zeros.
  if (!/^(0|[1-9]\d{0,18})$/.test(digits) || BigInt(digits) > 2n ** 63n - 1n) throw new ApiError('invalidEventId')
  return BigInt(digits)
}

/** The q-value (RFC 9110 12.4.2) of each media range an Accept header lists, by range in lower case. */
function acceptedRanges (accept: string): Map<string, number> {
  const ranges = new Map<string, number>()
  for (const element of accept.split(',')) {
    const [range, ...parameters] = element.split(';').map(part => part.trim().toLowerCase())
    const q = parameters.find(parameter => /^q\s*=/.test(parameter))?.replace(/^q\s*=\s*/, '')
    if (range !== '') ranges.set(range, q === undefined ? 1 : /^(0(\.\d{0,3})?|1(\.0{0,3})?)$/.test(q) ? Number(q) : 0)
  }
  return ranges
}

/**
 * True when the client asks for Server-Sent Events: it names text/event-stream with a q-value
 * above 0 and no lower than the one it gives JSON (by JSON's most specific range). A wildcard
 * alone (`*\/*`) asks for nothing in particular: JSON.
 */
function wantsStream (accept: string | undefined): boolean {
  if (accept === undefined || !/text\/event-stream/i.test(accept)) return false
  const ranges = acceptedRanges(accept)
  const stream = ranges.get('text/event-stream') ?? 0
  const json = ranges.get('application/json') ?? ranges.get('application/*') ?? ranges.get('*/*') ?? 0
  return stream > 0 && stream >= json
}

export const changes: FastifyPluginAsync<{ store: Store, feed: Feed, stillAllowed: StillAllowed, log: Logger }> = async (app, { store, feed, stillAllowed, log }) => {
  app.route<{ Querystring: { after?: bigint, limit: number, tag?: string, wait: number } }>({
    ...LIST_CHANGES,
    config: { scope: 'plants:read' },
    handler: async (request, reply) => {
      const { limit, tag, wait } = request.query
      varyAlsoOn(reply, 'Accept') // JSON or the stream, by Accept: caches must keep the two apart
      if (wantsStream(request.headers.accept)) {
        const after = eventIdOf(request.headers['last-event-id'] as string | undefined) ?? request.query.after
        const first = await pageAfter(store, { after, limit: 100, tag })
        // HEAD: the stream's head, as its GET would have it, and no stream (no reader's place taken).
        if (request.method === 'HEAD') return await reply.headers(STREAM_HEADERS).send()
        if (!feed.admit('streams')) throw new ApiError('tooManyReaders')
        try {
          // Compiled once per route (Fastify keeps it by schema), with the serializer of every JSON answer.
          const serialize = reply.compileSerializationSchema(CHANGE_SCHEMA, '200')
          await streamChanges({ request, reply, store, feed, stillAllowed, log, tag, first, given: after, serialize })
        } finally {
          feed.release('streams')
        }
        return reply
      }
      let page = await pageAfter(store, { after: request.query.after, limit, tag })
      // HEAD never waits: the head of the page there is now, and no reader's place taken.
      if (page.changes.length === 0 && wait > 0 && request.method !== 'HEAD' && !feed.closing) {
        if (!feed.admit('polls')) throw new ApiError('tooManyReaders')
        try {
          // Nothing yet: wait for the head to move past what was read, then read on, until a change or the deadline.
          const deadline = performance.now() + wait * 1000
          const left = (): number => deadline - performance.now()
          const clientLeft = new Promise<false>(resolve => reply.raw.once('close', () => resolve(false)))
          while (page.changes.length === 0 && left() > 0 && await Promise.race([feed.beyond(page.next, left()), clientLeft])) {
            page = await pageAfter(store, { after: page.next, limit, tag })
          }
        } finally {
          feed.release('polls')
        }
        // The token as it stands now, not as the poll found it: one revoked or expired meanwhile gets none of the changes made since.
        if (!await stillAllowed(request, 'plants:read')) throw new ApiError('badToken')
      }
      reply.header('link', linkTo(request.url, 'after', page.next))
      return page.changes.map(changeOf)
    }
  })

  // The path is a plant's too (`/plants/{id}` takes PUT and DELETE): without these, the router
  // would hand `PUT /plants/changes` to it, and the id "changes" would be a 400 instead of a 405.
  // Answered before the body is read, as every method no route takes is (src/app.ts).
  app.route({
    method: ['PUT', 'DELETE'],
    url: '/plants/changes',
    config: { unrouted: true }, // counted and logged as the refusals of the other methods, under no route
    onRequest: (request, _reply, done) => { done(unroutedRefusal(request)) },
    handler: async (request) => { throw unroutedRefusal(request) } // not reached: onRequest has answered
  })
}
