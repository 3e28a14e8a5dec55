// The request body as the node:http yardsticks read it (scripts/yardsticks.ts, scripts/yardstick-fastify.ts).
import type { IncomingMessage, ServerResponse } from 'node:http'

type Fail = (response: ServerResponse, status: number, message: string) => void

/** A JSON request's body as text for `accept`; not JSON is 415, past `limit` bytes 413 (read to its end, not kept). */
export function readJsonText (request: IncomingMessage, response: ServerResponse, limit: number, fail: Fail, accept: (text: string) => void): void {
  if (!(request.headers['content-type'] ?? '').startsWith('application/json')) return fail(response, 415, 'The request body must be JSON.')
  const chunks: Buffer[] = []
  let size = 0
  request.on('data', (chunk: Buffer) => {
    size += chunk.length
    if (size <= limit) chunks.push(chunk)
  })
  request.on('end', () => {
    if (size > limit) return fail(response, 413, `The request body is larger than ${limit / 1024} KiB.`)
    accept((chunks.length === 1 ? chunks[0] : Buffer.concat(chunks)).toString('utf8'))
  })
}
