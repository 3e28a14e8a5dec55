import type { FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { MAX_PATH } from './contract.js'
import { ApiError, FRAGMENT_MESSAGE, LONG_PATH_MESSAGE } from './errors.js'
import { framingUntrusted } from './http-server.js'

/** Headers that mean one thing: given twice, which one counts is a guess (RFC 9110 5.3), so neither does. */
const SINGLE = new Map([['authorization', 'Authorization'], ['host', 'Host'], ['content-type', 'Content-Type']])

/** The first single-valued header the request carries twice; Node keeps only the first, so the raw list is counted. */
function repeatedHeader (request: FastifyRequest): string | undefined {
  const raw = request.raw.rawHeaders
  const seen: string[] = []
  for (let i = 0; i < raw.length; i += 2) {
    const length = raw[i].length
    if (length !== 4 && length !== 12 && length !== 13) continue // host, content-type, authorization
    const name = SINGLE.get(raw[i].toLowerCase())
    if (name === undefined) continue
    if (seen.includes(name)) return name
    seen.push(name)
  }
  return undefined
}

/** True when every percent-escape in `text` is a byte of valid UTF-8. */
function decodable (text: string): boolean {
  if (!text.includes('%')) return true
  try {
    decodeURIComponent(text)
    return true
  } catch {
    return false
  }
}

/** True when the expectations listed (Expect headers, joined by Node) are `100-continue`, at least one, without parameters; empty list elements are ignored (RFC 9110 5.6.1). */
export function onlyContinue (expect: string | undefined): boolean {
  const members = (expect ?? '').split(',').map(member => member.trim()).filter(member => member !== '')
  return members.length > 0 && members.every(member => member.toLowerCase() === '100-continue')
}

/**
 * The refusal of a request whose head fails the checks that come before everything else, auth
 * included, or undefined when it passes: a version other than HTTP/1.x (0.9, 2.0 in text) is 505
 * (RFC 9110 15.6.6); HTTP/1.1 requires Host; a path longer than MAX_PATH is
 * 414, whether or not it names a route; a target with a fragment (`#`) is 400; a transfer coding other than chunked is 501 (RFC 9112
 * 6.1), and any Transfer-Encoding on HTTP/1.0 is 400 (framingUntrusted); a second Authorization, Host or Content-Type header is ambiguous (which token, which
 * host, which parser?), so it is refused rather than settled by taking the first. A DELETE has
 * its content type ignored, so `DELETE` with a stray `Content-Type: application/json` and an
 * empty body, even a chunked one (on HTTP/1.1), is an ordinary DELETE.
 */
export function edgeRefusal (request: FastifyRequest, log: Logger): ApiError | undefined {
  if (request.raw.httpVersionMajor !== 1) return new ApiError('httpVersionNotSupported')
  if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
    // Routed (its route's series and request line have it too), but worth a warn line, as a malformed request is.
    log.warn({ reqId: request.id, status: 400, reason: 'missingHost' }, 'request refused: no Host header')
    return new ApiError('missingHost')
  }
  // Node reads Expect on HTTP/1.1 only (417 before routing); on 1.0 one other than 100-continue
  // is refused alike, and 100-continue itself is ignored (RFC 9110 10.1.1).
  if (request.raw.httpVersionMinor === 0 && request.headers.expect !== undefined && !onlyContinue(request.headers.expect)) return new ApiError('expectationFailed')
  const query = request.url.indexOf('?')
  if ((query === -1 ? request.url.length : query) > MAX_PATH) return new ApiError('pathTooLong', LONG_PATH_MESSAGE)
  // Node's parser takes a fragment; the router would read `/plants#limit=1` as a query.
  if (request.url.includes('#')) return new ApiError('badPath', FRAGMENT_MESSAGE)
  // The query parser takes undecodable text literally; a path answers 400 for the same bytes.
  if (query !== -1 && !decodable(request.url.slice(query + 1))) return new ApiError('badQuery')
  if (framingUntrusted(request.raw)) return new ApiError('transferEncodingOnHttp10')
  // Node reads chunked framing; any other transfer coding (gzip, chunked) would reach the parser
  // still coded (501, RFC 9112 6.1). Without chunked last, the body has no end to find: 400, and
  // the connection closes (RFC 9112 6.3).
  const coding = request.headers['transfer-encoding']?.trim().toLowerCase()
  if (coding !== undefined && coding !== 'chunked') return new ApiError(/(^|[\s,])chunked$/.test(coding) ? 'unsupportedTransferCoding' : 'unframedBody')
  const repeated = repeatedHeader(request)
  if (repeated !== undefined) return new ApiError('repeatedHeader', `The ${repeated} header was sent more than once; send it once.`)
  // DELETE takes no body: whatever content type it declares, nothing is parsed (Fastify reads no body for GET).
  if (request.method === 'DELETE') delete request.headers['content-type']
  return undefined
}
