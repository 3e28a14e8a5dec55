import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { STATUS_CODES, type IncomingMessage, type ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import type { Logger } from 'pino'
import { allowedMethods, BODY_LIMIT, MAX_PATH } from './contract.js'
import type { Cors } from './cors.js'
import { answerInItsTurn } from './http-server.js'

/** Every named failure, once: its status and the sentence the client reads. */
export const failures = {
  invalidBody: { status: 400, message: 'The request body is not valid.' },
  invalidJson: { status: 400, message: 'The request body is not valid JSON; send a JSON object.' },
  emptyBody: { status: 400, message: 'The request body is empty; send a JSON object.' },
  missingBody: { status: 400, message: 'The request has no body; send a JSON object, as application/json.' },
  invalidParameter: { status: 400, message: 'A path or query parameter is not valid.' },
  invalidText: { status: 400, message: 'The request body is not valid UTF-8 text.' },
  badRequest: { status: 400, message: 'The request could not be understood.' },
  connectNotServed: { status: 400, message: 'This server is not a proxy: CONNECT is not served.' },
  badPath: { status: 400, message: 'The request path is not valid: a "%" must start a percent-encoded UTF-8 byte such as "%20".' },
  badQuery: { status: 400, message: 'The query string is not valid: a "%" must start a percent-encoded UTF-8 byte such as "%20".' },
  missingHost: { status: 400, message: 'The request has no Host header, which HTTP/1.1 requires.' },
  repeatedHeader: { status: 400, message: 'A header that takes one value was sent more than once; send it once.' },
  invalidCondition: { status: 400, message: 'A conditional header is not valid: send "*" or ETags in double quotes.' },
  webhookUrlRefused: { status: 400, message: 'The webhook URL cannot be used.' },
  invalidEventId: { status: 400, message: 'The Last-Event-ID header must be a position: a whole number in plain decimal digits, without leading zeros.' },
  bodyLengthMismatch: { status: 400, message: 'The request body is shorter or longer than its Content-Length header says.' },
  badToken: { status: 401, message: 'A valid bearer token is required: send "Authorization: Bearer <token>".', headers: { 'www-authenticate': 'Bearer' } },
  missingScope: { status: 403, message: 'This token lacks the scope this operation needs.' },
  plantNotFound: { status: 404, message: 'No plant has this id.' },
  webhookNotFound: { status: 404, message: 'No webhook subscription has this id.' },
  deliveryNotFound: { status: 404, message: 'This webhook subscription has no delivery with this id.' },
  routeNotFound: { status: 404, message: 'There is no such route; see /openapi.json for the ones there are.' },
  fileNotFound: { status: 404, message: 'The API reference has no file of this name; open /docs.' },
  methodNotAllowed: { status: 405, message: 'This method is not allowed here; the Allow header lists the ones that are.' },
  requestTimeout: { status: 408, message: 'The request took too long to arrive; send it again, all at once.' },
  changesGone: { status: 410, message: 'The change log no longer holds the changes after this position (or never reached it); list the plants again and follow the feed from the Changes-Position of that list.' },
  preconditionFailed: { status: 412, message: 'The plant is not at a version this request\'s condition accepts; nothing was changed. Read it again for its current ETag.' },
  webhookDisabled: { status: 409, message: 'This webhook subscription is disabled, so nothing is sent to it: enable it (POST /webhooks/{id}/enable), then retry.' },
  plantConflict: { status: 409, message: 'A plant with this id is stored already, with other data; nothing was changed (the same data again is answered 200).' },
  bodyTooLarge: { status: 413, message: 'The request body is larger than 64 KiB.' },
  pathTooLong: { status: 414, message: 'A path parameter is longer than 100 characters.' },
  unsupportedMediaType: { status: 415, message: 'The request body must be JSON, sent with "Content-Type: application/json".' },
  unsupportedEncoding: { status: 415, message: 'The request body must be sent uncompressed: no Content-Encoding.' },
  unsupportedCharset: { status: 415, message: 'The request body must be UTF-8: send "Content-Type: application/json" with no other charset.' },
  expectationFailed: { status: 417, message: 'Only "Expect: 100-continue" is supported.' },
  headersTooLarge: { status: 431, message: 'The request headers are too large.' },
  rateLimited: { status: 429, message: 'This token sent too many requests; wait for the number of seconds in Retry-After.' },
  unframedBody: { status: 400, message: 'The request\'s Transfer-Encoding does not end with chunked, so where its body ends cannot be told; the connection is closed.' },
  transferEncodingOnHttp10: { status: 400, message: 'An HTTP/1.0 request cannot use Transfer-Encoding, so where its body ends cannot be trusted; the connection is closed.' },
  unsupportedTransferCoding: { status: 501, message: 'The request uses a transfer coding other than chunked, which this server does not implement; send the body uncompressed.' },
  httpVersionNotSupported: { status: 505, message: 'This server speaks HTTP/1.1 (and HTTP/1.0); send the request in one of those versions.' },
  internal: { status: 500, message: 'Something went wrong on our side; it has been logged.' },
  unavailable: { status: 503, message: 'The store is unavailable right now; retry after the number of seconds in Retry-After.', headers: { 'retry-after': '1' } },
  tooManyReaders: { status: 503, message: 'As many change streams and waiting polls are open as the server takes; retry after the number of seconds in Retry-After.', headers: { 'retry-after': '1' } },
  metricsUnavailable: { status: 503, message: 'The workers\' metrics could not be gathered right now; retry after the number of seconds in Retry-After.', headers: { 'retry-after': '1' } }
} satisfies Record<string, { status: number, message: string, headers?: Record<string, string> }>

export type FailureName = keyof typeof failures

/** A failure with a name from `failures`; `detail` replaces the standard sentence, `headers` add to the failure's own. */
export class ApiError extends Error {
  readonly status: number
  readonly headers: Record<string, string>
  constructor (readonly failure: FailureName, detail?: string, headers: Record<string, string> = {}) {
    const entry: { status: number, message: string, headers?: Record<string, string> } = failures[failure]
    super(detail ?? entry.message)
    this.status = entry.status
    this.headers = { ...entry.headers, ...headers }
  }
}

/**
 * Why a store refused: at its cap of work in flight, past a call's deadline (about 2 s), or
 * storage that cannot answer (disk, lock, lost connection). All three are 503; metrics tell them apart.
 */
export type UnavailableReason = 'capacity' | 'deadline' | 'unavailable'

/**
 * Thrown by stores when the storage itself cannot answer (disk, lock, lost worker), or sheds work
 * past its bounds. `outcomeUnknown`: a write that may have been made all the same (its deadline
 * passed while it ran, or its COMMIT warned); without it, a refusal before anything was written
 * or an outcome the store does not know of.
 */
export class StoreUnavailableError extends Error {
  constructor (message: string, readonly reason: UnavailableReason = 'unavailable', readonly outcomeUnknown = false) {
    super(message)
  }
}

/** Thrown by stores for text they cannot keep exactly (PostgreSQL's text cannot hold U+0000): the client's to fix, 400. */
export class UnstorableTextError extends Error {}

/** The Error body: exactly `error` (the status) and `message`. */
export function errorBody (status: number, message: string): string {
  return JSON.stringify({ error: status, message })
}

/** One of Ajv's complaints, as the validators of src/contract.ts make them (`verbose`). */
export interface ValidationIssue { instancePath: string, keyword: string, message?: string, params: Record<string, unknown>, data?: unknown, schema?: unknown }

const ARTICLES: Record<string, string> = { string: 'a string', integer: 'an integer', number: 'a number', object: 'a JSON object', array: 'an array', boolean: 'true or false' }

/** What an Ajv complaint asks for, as words: "must be a string", "must not be empty". */
export function rule ({ keyword, message, params, schema }: ValidationIssue): string {
  switch (keyword) {
    case 'required': return 'is required'
    case 'additionalProperties': return 'is not one this operation takes'
    case 'x-int64': {
      const { minimum, maximum } = schema as { minimum: string, maximum: string }
      return `must be an integer from ${minimum} to ${maximum}`
    }
    case 'x-integer': {
      const { minimum, maximum } = schema as { minimum: string, maximum: string }
      return `must be a whole number from ${minimum} to ${maximum}, in plain decimal digits without leading zeros`
    }
    case 'type': return `must be ${ARTICLES[String(params.type)] ?? String(params.type)}`
    case 'minLength': return params.limit === 1 ? 'must not be empty' : `must be at least ${String(params.limit)} characters long`
    case 'maxLength': return `must be at most ${String(params.limit)} characters long`
    case 'minItems': return `must hold at least ${String(params.limit)} item${params.limit === 1 ? '' : 's'}`
    case 'uniqueItems': return 'must not hold an item twice'
    case 'enum': return `must be one of ${(params.allowedValues as unknown[]).map(value => JSON.stringify(value)).join(', ')}`
    case 'minimum': return `must be at least ${String(params.limit)}`
    case 'maximum': return `must be at most ${String(params.limit)}`
    default: return message ?? 'is not valid'
  }
}

/** A field's name as a message shows it: cut to 64 characters, so that a long key cannot fill the line. */
export function shortField (field: string): string {
  return field.length > 64 ? field.slice(0, 61) + '...' : field
}

/** The field an Ajv complaint is about, dotted (`tag`, `a.b`), cut to 64 characters; '' for the value itself. */
export function fieldOf (issue: ValidationIssue): string {
  return shortField(issue.keyword === 'required'
    ? String(issue.params.missingProperty)
    : issue.keyword === 'additionalProperties'
      ? String(issue.params.additionalProperty)
      : issue.instancePath.replace(/^\//, '').replaceAll('/', '.'))
}

/** One sentence out of Ajv's first complaint, naming the field: "`id` in the request body is required." */
function describeValidation (context: string, issues: ValidationIssue[]): string {
  const issue = issues[0]
  const named = fieldOf(issue)
  const where = context === 'body' ? 'in the request body' : context === 'params' ? 'in the path' : 'in the query'
  // `?=1`, `{"": 1}`: a name that is empty names nothing.
  if (named === '' && issue.keyword === 'additionalProperties') return `A ${context === 'body' ? 'field' : 'parameter'} with an empty name ${where} is not one this operation takes.`
  if (named === '') return context === 'body' ? `The request body ${rule(issue)}.` : `The ${context} ${rule(issue)}.`
  // The query parser hands a parameter given twice (`tag=a&tag=b`) over as an array.
  const complaint = context === 'querystring' && Array.isArray(issue.data) ? 'is given more than once; give it once' : rule(issue)
  return `\`${named}\` ${where} ${complaint}.`
}

/** Fastify's own error codes, as our named failures. */
const fastifyCodes: Record<string, FailureName> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'bodyTooLarge',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupportedMediaType',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bodyLengthMismatch',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'emptyBody',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalidJson',
  FST_ERR_BAD_URL: 'badPath',
  FST_ERR_MAX_PARAM_LENGTH: 'pathTooLong'
}

/** `bodyless`: the request came without a body or a content type, so no parser ran and the body schema met nothing. */
function toApiError (error: FastifyError, bodyless = false): ApiError {
  if (error instanceof ApiError) return error
  if (error instanceof StoreUnavailableError) return new ApiError('unavailable')
  if (error instanceof UnstorableTextError) return new ApiError('invalidBody', error.message)
  if (error.validation !== undefined) {
    const context = error.validationContext ?? 'body'
    if (context === 'body' && bodyless) return new ApiError('missingBody')
    return new ApiError(context === 'body' ? 'invalidBody' : 'invalidParameter', describeValidation(context, error.validation as ValidationIssue[]))
  }
  const named = fastifyCodes[error.code]
  if (named !== undefined) return new ApiError(named)
  const status = error.statusCode ?? 500
  if (status >= 400 && status < 500) return new ApiError('badRequest')
  return new ApiError('internal')
}

function send (reply: FastifyReply, failure: ApiError): FastifyReply {
  // A refusal before the body was read (no route, no token) leaves it unread: the connection
  // closes after the answer, as Fastify's own 413 does, rather than drain a body of any size and
  // answer again if it then breaks or stalls. A body read whole and refused (not JSON, another
  // charset) leaves the connection as good as any: Fastify's close after its parsers' refusals goes.
  if (bodyUnread(reply.request.raw)) reply.header('connection', 'close')
  // Kept, it is said as Node says it on every kept connection's answer (Node drops its own words
  // once a Connection header was set, even if removed). Fastify's close while the server stops
  // is on the raw answer, and stays.
  else if (reply.hasHeader('connection') && reply.raw.getHeader('connection') === undefined && reply.raw.shouldKeepAlive) {
    reply.header('connection', 'keep-alive').header('keep-alive', `timeout=${Math.floor(reply.server.server.keepAliveTimeout / 1000)}`)
  }
  return reply.code(failure.status).headers(failure.headers).type('application/json').send(errorBody(failure.status, failure.message))
}

/** True while a request's declared body has not all arrived. */
function bodyUnread (request: IncomingMessage): boolean {
  return !request.complete && (request.headers['transfer-encoding'] !== undefined || Number(request.headers['content-length'] ?? 0) > 0)
}

/**
 * A warn line for storage trouble (503), at most one a second, counting the requests refused
 * since the last: a stalled disk refuses hundreds a second, and must not flood the log as well.
 */
function onceASecond (log: Logger): (reqId: string, cause: string) => void {
  let lastAt = -Infinity
  let refused = 0
  return (reqId, cause) => {
    refused++
    const now = performance.now()
    if (now - lastAt < 1000) return
    log.warn({ reqId, cause, refused }, 'store unavailable: answering 503')
    lastAt = now
    refused = 0
  }
}

/**
 * Counts a request refused before routing, by its status and reason, and its connection when Node
 * refused it: for the metrics. When that connection's request had been routed (its body too slow
 * or malformed), its route's record has it and it is no refusal before routing: then the answer
 * is that request's id.
 */
export type CountRefusal = (status: number, reason: FailureName, socket?: Socket) => { reqId: string } | undefined

/** Reports a request that Node or Fastify refused, by the failure it was answered with. */
export type ReportRefusal = (reason: FailureName, fields?: { reqId?: string, code?: string }, socket?: Socket) => void

/**
 * A request refused by Node or Fastify: a count, and a warn line with its reason (never a header
 * value, so never a token): before routing, or, for a request routed already, as its body arrived
 * (too slow, malformed); that one is in its route's records too.
 */
export function refusalReport (log: Logger, count: CountRefusal): ReportRefusal {
  return (reason, fields = {}, socket) => {
    const { status } = failures[reason]
    const routed = count(status, reason, socket)
    if (routed === undefined) log.warn({ ...fields, status, reason }, 'request refused before routing')
    else log.warn({ ...routed, ...fields, status, reason }, 'request refused as its body arrived')
  }
}

/** The answer to a request that no route takes: 405 with Allow where the document has the path, else 404. */
export function unroutedRefusal (request: FastifyRequest): ApiError {
  const allowed = allowedMethods(request.url.split('?')[0])
  return allowed.length > 0 ? new ApiError('methodNotAllowed', undefined, { allow: allowed.join(', ') }) : new ApiError('routeNotFound')
}

/** Replaces Fastify's and Node's error replies with the Error body, everywhere; `refused` reports what is answered before routing. */
export function installErrorHandling (app: FastifyInstance, log: Logger, refused: ReportRefusal, cors?: Cors): void {
  const storeTrouble = onceASecond(log)
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const failure = toApiError(error, request.body === undefined)
    if (failure.failure === 'unavailable') storeTrouble(request.id, error.message)
    // A 500 is a bug; the other 5xx (a reader cap reached, a transfer coding not implemented) are answers, in the request line.
    else if (failure.failure === 'internal') log.error({ reqId: request.id, err: error }, 'request failed')
    return send(reply, failure)
  })

  // Reached only where the onRequest hook did not answer already (it answers every request no route takes).
  app.setNotFoundHandler((request, reply) => send(reply, unroutedRefusal(request)))

  // Node answers an Expect other than 100-continue with an empty 417 unless someone listens.
  app.server.on('checkExpectation', (_request: IncomingMessage, response: ServerResponse) => {
    refused('expectationFailed')
    answerBeforeBody(response, failures.expectationFailed, cors)
  })
  // Expect: 100-continue asks whether to send the body (RFC 9110 10.1.1): one declared over the
  // limit is refused now. Any other is told to go on when its body is first read (Fastify resumes
  // the stream), after the edge checks, routing, auth and the rate limit: a request refused by
  // those gets its answer instead of the 100, and Node closes the connection after it.
  app.server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
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
    app.server.emit('request', request, response)
  })

  // Node hands a CONNECT request to a 'connect' listener and, without one, closes the connection unanswered.
  app.server.on('connect', (_request: IncomingMessage, socket: Socket) => {
    refused('connectNotServed')
    answerOnSocket(socket, failures.connectNotServed, { cors })
  })
}

/**
 * Fastify's `frameworkErrors`: a path that cannot be routed (bad percent-encoding, a parameter
 * over the length limit) answers the Error body, logged like every failure before routing.
 */
export function frameworkErrorHandler (refused: ReportRefusal): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    // The router cannot read an absolute-form target with a fragment (`http://h/plants#a`): said as the edge check says it.
    const failure = error.code === 'FST_ERR_BAD_URL' && request.raw.url?.includes('#') === true ? new ApiError('badPath', FRAGMENT_MESSAGE) : toApiError(error)
    refused(failure.failure, { reqId: request.id })
    send(reply, failure)
  }
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

/** What a request target with a fragment is told, by the edge check or here. */
export const FRAGMENT_MESSAGE = 'The request target holds a "#": a fragment stays with the client and is not sent in HTTP (RFC 9112 3.2); write "#" in a path or query as "%23".'

/** What a path longer than MAX_PATH is told, by the edge check or here. */
export const LONG_PATH_MESSAGE = `The path is longer than ${MAX_PATH} characters.`

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

/** True when the expectations listed (Expect headers, joined by Node) are `100-continue`, at least one, without parameters; empty list elements are ignored (RFC 9110 5.6.1). */
export function onlyContinue (expect: string | undefined): boolean {
  const members = (expect ?? '').split(',').map(member => member.trim()).filter(member => member !== '')
  return members.length > 0 && members.every(member => member.toLowerCase() === '100-continue')
}

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
function answerOnSocket (socket: Socket, failure: { status: number, message: string }, { method, cors }: { method?: string, cors?: Cors }): void {
  socket.pause()
  const body = errorBody(failure.status, failure.message)
  // One whose head was read (its body failed) is answered by what it said: HEAD without the body,
  // and its Origin's CORS headers. One whose head failed, by the method read from its bytes, if any.
  const request = arrivingRequest(socket as Connection)
  const head = (request?.method ?? method) === 'HEAD'
  const cross = Object.entries(cors?.headersFor(request?.headers.origin) ?? {}).map(([name, value]) => `${name}: ${value}\r\n`).join('')
  socket.end(`HTTP/1.1 ${failure.status} ${STATUS_CODES[failure.status] ?? ''}\r\nDate: ${new Date().toUTCString()}\r\n${cross}` +
    `Content-Type: ${JSON_TYPE}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${head ? '' : body}`)
  const drop = setTimeout(() => socket.destroy(), LINGER_MS).unref()
  socket.once('close', () => clearTimeout(drop))
}
