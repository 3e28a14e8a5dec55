// The answers to requests that fail, or wait, before Fastify sees them: malformed HTTP, a head too
// large, a request that stops arriving, an Expect refused, a CONNECT. Node would answer these with
// its own bodies, or not at all; here each is the Error body, written on the connection, which then
// closes: what follows the failure is not a request.
import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { BODY_LIMIT, MAX_PATH } from './contract.js'
import type { Cors } from './cors.js'
import { onlyContinue } from './edge.js'
import { errorBody, failures, LONG_PATH_MESSAGE, type FailureName, type ReportRefusal } from './errors.js'
import { answerInItsTurn } from './http-server.js'

/**
 * Answers, with the Error body, what Node would otherwise answer by itself or not at all: an
 * Expect other than 100-continue (Node's empty 417), a body declared over the limit before it is
 * sent, a CONNECT (Node would close the connection unanswered).
 */
export function installNodeRefusals (server: Server, refused: ReportRefusal, cors: Cors | undefined): void {
  // Node answers an Expect other than 100-continue with an empty 417 unless someone listens.
  server.on('checkExpectation', (_request: IncomingMessage, response: ServerResponse) => {
    refused('expectationFailed')
    answerBeforeBody(response, failures.expectationFailed, cors)
  })
  // Expect: 100-continue asks whether to send the body (RFC 9110 10.1.1): one declared over the
  // limit is refused now. Any other is told to go on when its body is first read (Fastify resumes
  // the stream), after the edge checks, routing, auth and the rate limit: a request refused by
  // those gets its answer instead of the 100, and Node closes the connection after it.
  server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    // Node takes any Expect that names 100-continue among others (`100-continue, foo`) for one.
    if (!onlyContinue(request.headers.expect)) {
      refused('expectationFailed')
      return answerBeforeBody(response, failures.expectationFailed, cors)
    }
    if (Number(request.headers['content-length']) > BODY_LIMIT) {
      refused('bodyTooLarge')
      return answerBeforeBody(response, failures.bodyTooLarge, cors)
    }
    request.once('resume', () => {
      // Node also resumes a request to discard its unread body once answered: no 100 then.
      if (!response.headersSent) response.writeContinue()
    })
    server.emit('request', request, response)
  })

  // Node hands a CONNECT request to a 'connect' listener and, without one, closes the connection unanswered.
  server.on('connect', (request: IncomingMessage, socket: Socket) => {
    refused('connectNotServed')
    answerOnSocket(socket, failures.connectNotServed, { request, cors })
  })
}

/** Node's errors before a request reaches Fastify, as named failures. */
const clientErrorCodes: Record<string, FailureName> = {
  ERR_HTTP_REQUEST_TIMEOUT: 'requestTimeout',
  // HTTP/2's connection preface (`PRI * HTTP/2.0`, a client that assumes HTTP/2 without asking).
  HPE_PAUSED_H2_UPGRADE: 'httpVersionNotSupported'
}

/**
 * True when the parser refused a well-formed request line for its HTTP major version (HTTP/3.0):
 * 505, where a malformed one (a bare line feed, `HTTP/a.1`) is 400. A version the parser takes but
 * this server does not (2.0, 0.9) is refused by the edge check. The line is looked for in the
 * bytes the parser was reading (pipelined after other requests, perhaps); one split between two
 * of the client's writes is not found there, and is a 400.
 */
function namesAnotherVersion (error: NodeJS.ErrnoException & { rawPacket?: Buffer }): boolean {
  return refusedVersion(error)?.startsWith('1.') === false
}

/** The version of a well-formed request line that the parser refused for its version alone (`3.0`, `1.2`), where it can be found. */
function refusedVersion (error: NodeJS.ErrnoException & { rawPacket?: Buffer }): string | undefined {
  if (error.code !== 'HPE_INVALID_VERSION') return undefined
  // Among the request lines the parser was reading (pipelined after others, perhaps), one of a version it does not read.
  return /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ [^ ]+ HTTP\/(?!1\.[01]\r)(\d\.\d)\r$/m.exec(error.rawPacket?.toString('latin1') ?? '')?.[1]
}

/**
 * A request line whose path is longer than MAX_PATH: where Node refused the head as too large,
 * the path alone was past the limit, 414 as the edge check answers a shorter long one. Looked
 * for at the start of the last head begun in the bytes the parser was reading; a line that came
 * in several reads (over a network, most lines of 16 KiB do) is not found there, and stays 431.
 */
const LONG_PATH = new RegExp(`^[!#$%&'*+.^_\`|~0-9A-Za-z-]+ [^ ?\\r\\n]{${MAX_PATH + 1}}`)

/** The failure of a head too large: 414 when its request line's path alone is too long, else 431. */
function headTooLarge (error: NodeJS.ErrnoException & { rawPacket?: Buffer, bytesParsed?: number }): 'pathTooLong' | 'headersTooLarge' {
  // The head refused is the last one begun before the parser stopped: after the last blank line there.
  const bytes = error.rawPacket?.toString('latin1', 0, error.bytesParsed) ?? ''
  const end = bytes.lastIndexOf('\r\n\r\n')
  return LONG_PATH.test(end === -1 ? bytes : bytes.slice(end + 4)) ? 'pathTooLong' : 'headersTooLarge'
}

/** True when the parser refused a Content-Length of decimal digits for its size alone (more than 64 bits): a body over the limit, 413. */
function declaresTooLong (error: NodeJS.ErrnoException & { reason?: string }): boolean {
  return error.code === 'HPE_INVALID_CONTENT_LENGTH' && error.reason === 'Content-Length overflow'
}

const BOTH_LENGTHS = 'The request has both Content-Length and Transfer-Encoding, or a Transfer-Encoding that cannot be read, so where its body ends is unclear; send one of the two.'

const REQUEST_LINE = 'The request line must be a method, a target and the version HTTP/1.1 (or HTTP/1.0), separated by single spaces and ended by CR LF.'
const LINE_ENDS = 'Each line of the request\'s head must end with CR LF, and hold no CR or LF of its own.'
const CHUNKS = 'The request\'s chunked body is malformed: each chunk is its size in hexadecimal on a line of its own, then its data, each ended by CR LF.'

/** What Node's parser found wrong (its error codes), said for the client; any other malformed request is named by the parser's own reason. */
const malformed: Record<string, string> = {
  HPE_INVALID_EOF_STATE: 'The request ended before it had arrived whole: the client closed its side of the connection first.',
  HPE_INVALID_CHUNK_SIZE: CHUNKS,
  HPE_CHUNK_EXTENSIONS_OVERFLOW: 'The request\'s chunk extensions are too long; send its chunks without extensions.',
  HPE_INVALID_TRANSFER_ENCODING: BOTH_LENGTHS,
  HPE_UNEXPECTED_CONTENT_LENGTH: 'The Content-Length header was sent more than once; send it once.',
  HPE_INVALID_CONTENT_LENGTH: 'The Content-Length header must be a number of bytes, in decimal digits.',
  HPE_INVALID_HEADER_TOKEN: 'A header line is not valid: it needs a name without spaces, a colon, and a value without control characters.',
  HPE_INVALID_METHOD: 'The request line must start with a method that HTTP defines, such as GET, POST, PUT or DELETE.',
  HPE_INVALID_URL: 'The request target must be a path, and a query, of visible ASCII characters: percent-encode spaces and any other.',
  HPE_INVALID_CONSTANT: REQUEST_LINE,
  HPE_INVALID_VERSION: REQUEST_LINE,
  HPE_LF_EXPECTED: LINE_ENDS,
  HPE_CR_EXPECTED: LINE_ENDS
}

/** What was wrong with a malformed request, as one sentence, where the parser tells. */
function malformedMessage (error: NodeJS.ErrnoException & { reason?: string }): string {
  // Content-Length after Transfer-Encoding is a Content-Length error to the parser: the same fault as the other order.
  if (error.code === 'HPE_INVALID_CONTENT_LENGTH' && error.reason?.includes('Transfer-Encoding') === true) return BOTH_LENGTHS
  // HTTP/1.2 and up: well-formed, and a version Node's parser does not read (RFC 9110 2.5 would have it read as 1.1).
  const version = refusedVersion(error)
  if (version !== undefined) return `The request line names HTTP/${version}, a version this server does not read; send the request as HTTP/1.1.`
  // The parser's line-ending codes serve chunked bodies too (`Expected LF after chunk data`).
  if (['HPE_CR_EXPECTED', 'HPE_LF_EXPECTED', 'HPE_STRICT'].includes(error.code ?? '') && /chunk/i.test(error.reason ?? '')) return CHUNKS
  return malformed[error.code ?? ''] ?? (error.reason === undefined ? failures.badRequest.message : `The request could not be understood as HTTP/1.1 (${error.reason}).`)
}

/** The failure Node's `error` stands for; a malformed request's with the sentence that says what was wrong. */
function clientFailure (name: FailureName, error: NodeJS.ErrnoException & { reason?: string }): { status: number, message: string } {
  if (name === 'pathTooLong') return { status: failures.pathTooLong.status, message: LONG_PATH_MESSAGE }
  return name === 'badRequest' ? { status: failures.badRequest.status, message: malformedMessage(error) } : failures[name]
}

/**
 * Answers requests that fail before Fastify sees them (malformed HTTP, oversized headers, a
 * request that stops arriving) with the Error body, and logs each at warn with its reason;
 * never a header value, so never a token.
 */
export function clientErrorHandler (refused: ReportRefusal, cors?: Cors): (error: NodeJS.ErrnoException, socket: Socket) => void {
  return (error, socket) => {
    const name = error.code === 'HPE_HEADER_OVERFLOW'
      ? headTooLarge(error)
      : clientErrorCodes[error.code ?? ''] ?? (declaresTooLong(error) ? 'bodyTooLarge' : namesAnotherVersion(error) ? 'httpVersionNotSupported' : 'badRequest')
    const failure = clientFailure(name, error)
    const method = failedMethod(error)
    // A reset or a closed socket is no request: nothing to answer and nothing worth a warning.
    if (error.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy()
      return
    }
    const current = (socket as Connection)._httpMessage ?? undefined
    if (current !== undefined && (current.headersSent || current.req.complete)) {
      // Not the request being read: one after those the connection is still answering (pipelined),
      // or one answered already (refused on its head; the parser then failed on its body). The
      // answers under way go out first, whole; then, if the connection is still open for it (an
      // answer that closes it, like that refusal, ends it), this one, counted before routing;
      // unless the answer under way was its own, sent while its body was still arriving.
      socket.pause() // no further request is read meanwhile: this answer ends the connection
      const answer = (): void => {
        refused(name, { code: error.code })
        answerOnSocket(socket, failure, { method, cors })
      }
      // One whose head had arrived waits for its turn: it is answered then, instead of carried out.
      const arriving = arrivingRequest(socket as Connection)
      if (arriving !== undefined && answerInItsTurn(arriving, answer)) return
      afterAnswersUnderWay(socket as Connection, () => {
        if (!socket.writable) return
        if (answeredStillArriving(socket as Connection)) return socket.destroy()
        answer()
      })
      return
    }
    if (answeredStillArriving(socket as Connection)) return socket.destroy()
    refused(name, { code: error.code }, socket)
    answerOnSocket(socket, failure, { method, cors })
  }
}

/**
 * The method of the request whose head Node's parser failed on, read from the bytes it was
 * parsing when they hold that request's start (after the last blank line before the failure),
 * else undefined: its answer to a HEAD must carry no body.
 */
function failedMethod (error: Error & { rawPacket?: unknown, bytesParsed?: number }): string | undefined {
  if (!Buffer.isBuffer(error.rawPacket)) return undefined
  const parsed = error.rawPacket.toString('latin1', 0, error.bytesParsed ?? error.rawPacket.length)
  const start = parsed.lastIndexOf('\r\n\r\n')
  return /^(?:\r\n)*([A-Z]+) /.exec(parsed.slice(start === -1 ? 0 : start + 4))?.[1]
}

/**
 * A connection as Node's server keeps it: the answer it is writing now, if any (Node's own
 * clientError handling reads it too), and its parser with the last request whose head it read.
 */
type Connection = Socket & { _httpMessage?: ServerResponse | null, parser?: { incoming?: IncomingMessage | null } | null }

/** The request whose head Node has read on `socket` and whose body it is still reading, if any. */
function arrivingRequest (socket: Connection): IncomingMessage | undefined {
  const incoming = socket.parser?.incoming
  return incoming != null && !incoming.complete ? incoming : undefined
}

/**
 * True when, with no answer under way on `socket`, the request Node is still reading there was
 * answered already: its answer went out before its body had arrived whole (a GET does not wait
 * for a body it does not read), and Node reads on to discard the rest. A second answer would
 * answer a request never sent, so the connection closes unanswered (Node would write a bare 408
 * after a finished answer; it writes nothing once an answer's head is out).
 */
function answeredStillArriving (socket: Connection): boolean {
  return arrivingRequest(socket) !== undefined && socket._httpMessage == null
}

/** Runs `then` once no answer is under way on `socket`: Node writes pipelined answers one after another, each in its turn. */
function afterAnswersUnderWay (socket: Connection, then: () => void): void {
  const current = socket._httpMessage ?? undefined
  if (current === undefined) return then()
  // 'close' follows the answer's end, or the connection's; the next answer is assigned on the way.
  current.once('close', () => setImmediate(() => afterAnswersUnderWay(socket, then)))
}

/** The Error body's type, as Fastify writes it for the answers it sends: the same on those sent outside it. */
const JSON_TYPE = 'application/json; charset=utf-8'

/** Answers a request whose body was not read, and closes its connection: what may follow the head is not a request. */
function answerBeforeBody (response: ServerResponse, failure: { status: number, message: string }, cors: Cors | undefined): void {
  const body = errorBody(failure.status, failure.message)
  response.writeHead(failure.status, { ...cors?.headersFor(response.req.headers.origin), 'content-type': JSON_TYPE, 'content-length': Buffer.byteLength(body), connection: 'close' }).end(body)
}

/**
 * How long a connection this server has closed after an answer outside Fastify stays open for
 * reading: the client reads the answer before anything more it sends is refused with a reset (a
 * lingering close, RFC 9112 9.6), and a client that never closes its side holds no descriptor
 * for longer than this.
 */
const LINGER_MS = 2000

/**
 * Writes `failure` as a whole HTTP answer with the Error body straight to `socket`, and closes it:
 * for answers outside Fastify. Nothing more is read from it: a request refused while it still
 * arrived (its head or body too slow) could otherwise arrive whole behind its answer, and be
 * carried out.
 */
function answerOnSocket (socket: Socket, failure: { status: number, message: string }, { request = arrivingRequest(socket as Connection), method, cors }: { request?: IncomingMessage, method?: string, cors?: Cors }): void {
  socket.pause()
  const body = errorBody(failure.status, failure.message)
  // One whose head was read (its body failed; a CONNECT) is answered by what it said: HEAD without
  // the body, and its Origin's CORS headers. One whose head failed, by the method read from its bytes, if any.
  const head = (request?.method ?? method) === 'HEAD'
  const cross = Object.entries(cors?.headersFor(request?.headers.origin) ?? {}).map(([name, value]) => `${name}: ${value}\r\n`).join('')
  socket.end(`HTTP/1.1 ${failure.status} ${STATUS_CODES[failure.status] ?? ''}\r\nDate: ${new Date().toUTCString()}\r\n${cross}` +
    `Content-Type: ${JSON_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${head ? '' : body}`)
  const drop = setTimeout(() => socket.destroy(), LINGER_MS).unref()
  socket.once('close', () => clearTimeout(drop))
}
