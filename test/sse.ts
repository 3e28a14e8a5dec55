// A Server-Sent Events reader for black-box tests: the raw stream parsed as the EventSource
// specification says (fields, comments, blank-line dispatch), over node:http.
import { request, type IncomingHttpHeaders } from 'node:http'
import { parseExact, type ExactChange } from './helpers.js'

export interface SseEvent { id?: string, event?: string, data: string }

export interface SseStream {
  status: number
  headers: IncomingHttpHeaders
  /** Events dispatched so far, in order. */
  events: SseEvent[]
  /** Comment lines (`: …`) and `retry:` values seen so far, with when they arrived (performance.now()). */
  comments: Array<{ text: string, at: number }>
  retry?: number
  /** The raw body, for answers that are not streams (an Error body). */
  text: () => string
  /** Resolves once at least `count` events match `match`, or rejects after `ms`. */
  until: (count: number, match?: (event: SseEvent) => boolean, ms?: number) => Promise<SseEvent[]>
  /** Resolves when the server ends the stream (or the connection is lost). */
  ended: Promise<void>
  close: () => void
}

/** Opens GET `url` with `Accept: text/event-stream` and the token; resolves once the status and headers arrived. */
export async function openStream (url: string, token: string | null, headers: Record<string, string> = {}): Promise<SseStream> {
  return await new Promise((resolve, reject) => {
    const req = request(url, {
      headers: { accept: 'text/event-stream', ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers }
    }, (res) => {
      res.setEncoding('utf8')
      let raw = ''
      let buffer = ''
      let pending: SseEvent = { data: '' }
      let hasData = false
      const waiters = new Set<() => void>()
      let endedResolve!: () => void
      const ended = new Promise<void>(resolve => { endedResolve = resolve })
      const stream: SseStream = {
        status: res.statusCode ?? 0,
        headers: res.headers,
        events: [],
        comments: [],
        text: () => raw,
        until: async (count, match = () => true, ms = 10_000) => await new Promise((resolve, reject) => {
          const check = (): boolean => {
            const found = stream.events.filter(match)
            if (found.length < count) return false
            clearTimeout(timer)
            waiters.delete(wake)
            resolve(found)
            return true
          }
          const wake = (): void => { check() }
          const timer = setTimeout(() => { waiters.delete(wake); reject(new Error(`${stream.events.filter(match).length} of ${count} events within ${ms} ms`)) }, ms)
          if (!check()) waiters.add(wake)
        }),
        ended,
        close: () => { req.destroy() }
      }
      const line = (text: string): void => {
        if (text === '') {
          if (hasData) stream.events.push(pending)
          pending = { data: '' }
          hasData = false
          return
        }
        if (text.startsWith(':')) { stream.comments.push({ text, at: performance.now() }); return }
        const colon = text.indexOf(':')
        const field = colon === -1 ? text : text.slice(0, colon)
        const value = colon === -1 ? '' : text.slice(colon + 1).replace(/^ /, '')
        if (field === 'data') { pending.data = hasData ? `${pending.data}\n${value}` : value; hasData = true }
        if (field === 'id') pending.id = value
        if (field === 'event') pending.event = value
        if (field === 'retry') stream.retry = Number(value)
      }
      res.on('data', (chunk: string) => {
        raw += chunk
        buffer += chunk
        const lines = buffer.split(/\r\n|\r|\n/)
        buffer = lines.pop()!
        for (const text of lines) line(text)
        for (const wake of [...waiters]) wake()
      })
      res.on('close', endedResolve)
      res.on('error', endedResolve)
      resolve(stream)
    })
    req.on('error', reject)
    req.end()
  })
}

/** The change of an event's data, its bigints kept exact: `position` and `id` as strings. */
export function changeIn (event: SseEvent): ExactChange {
  return parseExact<ExactChange>(event.data)
}
