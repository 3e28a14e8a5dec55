// Bytes the service sends as they are (the OpenAPI document, the reference page's files), kept in
// memory: tagged with a hash of their content, so that a client that holds them is answered 304,
// and gzip-compressed for a client that takes it, once, off the event loop, when first asked for.
import { createHash } from 'node:crypto'
import { promisify } from 'node:util'
import { gzip } from 'node:zlib'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { noneMatchFinds } from '../conditions.js'

const compress = promisify(gzip)

/** True when the Accept-Encoding header takes gzip (and does not refuse it with q=0). */
export function acceptsGzip (header: string | undefined): boolean {
  return (header ?? '').split(',').some(part => {
    const [coding, ...params] = part.split(';').map(piece => piece.trim().toLowerCase())
    return coding === 'gzip' && !params.some(param => /^q=0(\.0*)?$/.test(param))
  })
}

export class StaticFile {
  /** The first 12 hex digits of the content's SHA-256: the ETag's, and a versioned file name's. */
  readonly hash: string
  private gzipped?: Promise<Buffer>

  constructor (readonly type: string, readonly bytes: Buffer) {
    this.hash = createHash('sha256').update(bytes).digest('hex').slice(0, 12)
  }

  /**
   * Answers `request` with the file: 304 and no body when If-None-Match names it, else the bytes,
   * gzip-compressed where the request takes it. The ETag is weak: both codings carry it, with the
   * same content (a strong one would have to differ between them, RFC 9110 8.8.3).
   */
  async send (request: FastifyRequest, reply: FastifyReply, cacheControl: string): Promise<FastifyReply> {
    const held = noneMatchFinds(request.headers['if-none-match'], this.hash) // a malformed header is 400, before any header is set
    // Added to the Vary: Origin that CORS may have set, not in its place.
    const vary = reply.getHeader('vary')
    reply.headers({ 'cache-control': cacheControl, etag: `W/"${this.hash}"`, vary: vary === undefined ? 'Accept-Encoding' : `${String(vary)}, Accept-Encoding` })
    if (held) return reply.code(304).send()
    const gzipped = acceptsGzip(request.headers['accept-encoding']) ? await (this.gzipped ??= compress(this.bytes)) : undefined
    reply.headers({ 'x-content-type-options': 'nosniff' }).type(this.type)
    return gzipped === undefined ? reply.send(this.bytes) : reply.header('content-encoding', 'gzip').send(gzipped)
  }
}
