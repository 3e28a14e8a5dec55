import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { IncomingMessage } from 'node:http'
import type { Socket } from 'node:net'
import type { Logger } from 'pino'
import { allowedMethods, MAX_PATH } from './contract.js'

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

/** Replaces Fastify's error replies with the Error body (src/node-refusals.ts replaces Node's): a failed request, a route not found. */
export function installErrorHandling (app: FastifyInstance, log: Logger): void {
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

/** What a request target with a fragment is told, by the edge check or by the router's refusal above. */
export const FRAGMENT_MESSAGE = 'The request target holds a "#": a fragment stays with the client and is not sent in HTTP (RFC 9112 3.2); write "#" in a path or query as "%23".'

/** What a path longer than MAX_PATH is told, by the edge check or when Node refuses its head as too large (src/node-refusals.ts). */
export const LONG_PATH_MESSAGE = `The path is longer than ${MAX_PATH} characters.`
