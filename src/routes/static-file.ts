// Bytes the service sends as they are (the OpenAPI document, the reference page's files), kept in
// memory: tagged with a hash of their content, so that a client that holds them is answered 304,
// and gzip-compressed for a client that takes it, once, off the event loop, when first asked for.
import { createHash } from 'node:crypto'
import { promisify } from 'node:util'
import { gzip } from 'node:zlib'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ifNoneMatchNames } from '../conditions.js'
import { varyAlsoOn } from './vary.js'

const compress = promisify(gzip)

/**
 * True when the Accept-Encoding header takes gzip (RFC 9110 12.5.3): `gzip` (or its old name
 * `x-gzip`) with a weight above 0, or, where neither is named, `*` with one.
 */
function acceptsGzip (header: string | undefined): boolean {
  let gzip: number | undefined
  let any: number | undefined
  for (const part of (header ?? '').split(',')) {
    const [coding, ...params] = part.split(';').map(piece => piece.trim().toLowerCase())
    const weight = Number(params.find(param => param.startsWith('q='))?.slice(2) ?? 1)
    if (coding === 'gzip' || coding === 'x-gzip') gzip = Math.max(gzip ?? 0, weight)
    else if (coding === '*') any = Math.max(any ?? 0, weight)
  }
  return (gzip ?? any ?? 0) > 0
}

export class StaticFile {
  /** The first 12 hex digits of the content's SHA-256: the ETag's, and a versioned file name's. */
  readonly hash: string
  private gzipped?: Promise<Buffer>

  /** `type` is the Content-Type; `cacheControl` the Cache-Control of its answers, 304s included. */
  constructor (private readonly type: string, private readonly bytes: Buffer, private readonly cacheControl: string) {
    this.hash = createHash('sha256').update(bytes).digest('hex').slice(0, 12)
  }

  /**
   * Answers `request` with the file, gzip-compressed where the request takes it: 304 and no body
   * when If-None-Match names the ETag of that coding. Each coding has its own ETag (`W/"hash"`,
   * `W/"hash-gzip"`), so that a cache revalidating one never takes the other for it.
   */
  async send (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> {
    const gzip = acceptsGzip(request.headers['accept-encoding'])
    const tag = gzip ? `${this.hash}-gzip` : this.hash
    const held = ifNoneMatchNames(request.headers['if-none-match'], tag) // a malformed header is 400
    const body = held ? undefined : gzip ? await this.gzip() : this.bytes
    // Set once nothing can fail: an error answer carries none of them.
    reply.headers({ 'cache-control': this.cacheControl, etag: `W/"${tag}"` })
    varyAlsoOn(reply, 'Accept-Encoding')
    if (body === undefined) return reply.code(304).send()
    reply.headers({ 'x-content-type-options': 'nosniff' }).type(this.type)
    if (gzip) reply.header('content-encoding', 'gzip')
    return reply.send(body)
  }

  /** The gzip of the file, made on libuv's thread pool when first asked for; made again after a failure. */
  private async gzip (): Promise<Buffer> {
    this.gzipped ??= compress(this.bytes).catch((error: unknown) => {
      this.gzipped = undefined
      throw error
    })
    return await this.gzipped
  }
}
