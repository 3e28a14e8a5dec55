import { once } from 'node:events'
import { connect, type Socket } from 'node:net'
import type { TestContext } from 'node:test'
import type { Server } from './helpers.js'

export interface RawAnswer {
  /** Everything the server sent before it closed the connection (or the wait ran out). */
  text: string
  /** True when the server closed the connection; false when the wait ran out first. */
  closed: boolean
  /** Milliseconds from the first byte written to the close (or the end of the wait). */
  ms: number
}

/**
 * Writes raw bytes (a string, or parts written `gapMs` apart) to the server and collects the
 * answer until the server closes the connection or `waitMs` pass.
 */
export function rawExchange (server: Server, bytes: string | Buffer | Array<string | Buffer>, options: { endWrite?: boolean, waitMs?: number, gapMs?: number } = {}): Promise<RawAnswer> {
  const { hostname, port } = new URL(server.url)
  const parts = Array.isArray(bytes) ? bytes : [bytes]
  return new Promise((resolve, reject) => {
    const started = Date.now()
    const socket = connect(Number(port), hostname)
    let text = ''
    let closed = false
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { text += chunk })
    socket.on('error', reject)
    socket.on('close', () => {
      clearTimeout(timer)
      resolve({ text, closed, ms: Date.now() - started })
    })
    socket.on('end', () => { closed = true })
    const timer = setTimeout(() => socket.destroy(), options.waitMs ?? 2000)
    parts.forEach((part, i) => setTimeout(() => {
      if (!socket.destroyed) socket.write(part)
      if (i === parts.length - 1 && options.endWrite === true) socket.end()
    }, i * (options.gapMs ?? 0)))
  })
}

/** The status, lower-cased head and JSON body of the first answer in a raw exchange. */
export function parseRaw (raw: string): { status: number, headers: string, body: any } {
  const [head, ...rest] = raw.split('\r\n\r\n')
  const body = rest.join('\r\n\r\n')
  return { status: Number(head.split(' ')[1]), headers: head.toLowerCase(), body: body === '' ? undefined : JSON.parse(body) }
}

/** The header fields of the first answer in a raw exchange, values as sent; a field sent twice throws (Headers would join the two). */
export function rawHeaders (raw: string): Headers {
  const headers = new Headers()
  for (const line of raw.split('\r\n\r\n')[0].split('\r\n').slice(1)) {
    const [, name, value] = /^([^:]+):\s*(.*)$/s.exec(line) ?? []
    if (headers.has(name)) throw new Error(`${name} sent twice: ${raw}`)
    headers.set(name, value)
  }
  return headers
}

/** Asserts-friendly check that a raw answer is the Error body with this status, as JSON, with a Content-Length. */
export function isRawErrorBody (raw: string, status: number): boolean {
  const answer = parseRaw(raw)
  return answer.status === status && /content-type: application\/json; charset=utf-8\r?$/m.test(answer.headers) && /content-length: \d+/.test(answer.headers) &&
    answer.body !== undefined && Object.keys(answer.body).sort().join() === 'error,message' && answer.body.error === status &&
    typeof answer.body.message === 'string' && answer.body.message.length > 0
}

/** A raw connection to the server, open once this resolves and destroyed after the test, with all it has received so far as text. */
export async function rawConnection (t: TestContext, server: Server): Promise<{ socket: Socket, received: () => string }> {
  const { hostname, port } = new URL(server.url)
  const socket = connect(Number(port), hostname)
  t.after(() => socket.destroy())
  let text = ''
  socket.setEncoding('utf8').on('data', (chunk: string) => { text += chunk })
  await once(socket, 'connect')
  return { socket, received: () => text }
}
