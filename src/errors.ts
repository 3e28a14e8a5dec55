import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { STATUS_CODES } from 'node:http'
import type { Socket } from 'node:net'
import type { Logger } from 'pino'
import { allowedMethods } from './contract.js'

/** Every named failure, once: its status and the sentence the client reads. */
export const failures = {
  invalidBody: { status: 400, message: 'The request body is not valid.' },
  invalidJson: { status: 400, message: 'The request body is not valid JSON; send a JSON object.' },
  emptyBody: { status: 400, message: 'The request body is empty; send a JSON object.' },
  invalidParameter: { status: 400, message: 'A path or query parameter is not valid.' },
  badRequest: { status: 400, message: 'The request could not be understood.' },
  bodyLengthMismatch: { status: 400, message: 'The request body is shorter or longer than its Content-Length header says.' },
  badToken: { status: 401, message: 'A valid bearer token is required: send "Authorization: Bearer <token>".', headers: { 'www-authenticate': 'Bearer' } },
  missingScope: { status: 403, message: 'This token lacks the scope this operation needs.' },
  plantNotFound: { status: 404, message: 'No plant has this id.' },
  routeNotFound: { status: 404, message: 'There is no such route; see /openapi.json for the ones there are.' },
  methodNotAllowed: { status: 405, message: 'This method is not allowed here; the Allow header lists the ones that are.' },
  requestTimeout: { status: 408, message: 'The request took too long to arrive.' },
  plantConflict: { status: 409, message: 'Another plant already uses this id; nothing was changed.' },
  bodyTooLarge: { status: 413, message: 'The request body is larger than 64 KiB.' },
  unsupportedMediaType: { status: 415, message: 'The request body must be JSON, sent with "Content-Type: application/json".' },
  headersTooLarge: { status: 431, message: 'The request headers are too large.' },
  rateLimited: { status: 429, message: 'This token sent too many requests; wait for the number of seconds in Retry-After.' },
  internal: { status: 500, message: 'Something went wrong on our side; it has been logged.' },
  unavailable: { status: 503, message: 'The store is unavailable right now; retry after the number of seconds in Retry-After.', headers: { 'retry-after': '1' } }
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

/** Thrown by stores when the storage itself cannot answer (disk, lock, lost worker). */
export class StoreUnavailableError extends Error {}

/** The Error body: exactly `error` (the status) and `message`. */
export function errorBody (status: number, message: string): string {
  return JSON.stringify({ error: status, message })
}

interface ValidationIssue { instancePath: string, keyword: string, message?: string, params: Record<string, unknown> }

const ARTICLES: Record<string, string> = { string: 'a string', integer: 'an integer', number: 'a number', object: 'a JSON object', array: 'an array', boolean: 'true or false' }

/** What an Ajv complaint asks for, as words: "must be a string", "must not be empty". */
function rule ({ keyword, message, params }: ValidationIssue): string {
  switch (keyword) {
    case 'required': return 'is required'
    case 'x-int64': return 'must be an integer from -9223372036854775808 to 9223372036854775807'
    case 'type': return `must be ${ARTICLES[String(params.type)] ?? String(params.type)}`
    case 'minLength': return params.limit === 1 ? 'must not be empty' : `must be at least ${String(params.limit)} characters long`
    case 'maxLength': return `must be at most ${String(params.limit)} characters long`
    case 'minimum': return `must be at least ${String(params.limit)}`
    case 'maximum': return `must be at most ${String(params.limit)}`
    default: return message ?? 'is not valid'
  }
}

/** One sentence out of Ajv's first complaint, naming the field: "`id` in the request body is required." */
function describeValidation (context: string, issues: ValidationIssue[]): string {
  const issue = issues[0]
  const field = issue.keyword === 'required'
    ? String(issue.params.missingProperty)
    : issue.instancePath.replace(/^\//, '').replaceAll('/', '.')
  if (field === '') return context === 'body' ? `The request body ${rule(issue)}.` : `The ${context} ${rule(issue)}.`
  const where = context === 'body' ? 'in the request body' : context === 'params' ? 'in the path' : 'in the query'
  return `\`${field}\` ${where} ${rule(issue)}.`
}

/** Fastify's own error codes, as our named failures. */
const fastifyCodes: Record<string, FailureName> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'bodyTooLarge',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupportedMediaType',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'bodyLengthMismatch',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'emptyBody',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalidJson'
}

function toApiError (error: FastifyError): ApiError {
  if (error instanceof ApiError) return error
  if (error instanceof StoreUnavailableError) return new ApiError('unavailable')
  if (error.validation !== undefined) {
    const context = error.validationContext ?? 'body'
    return new ApiError(context === 'body' ? 'invalidBody' : 'invalidParameter', describeValidation(context, error.validation as ValidationIssue[]))
  }
  const named = fastifyCodes[error.code]
  if (named !== undefined) return new ApiError(named)
  const status = error.statusCode ?? 500
  if (status >= 400 && status < 500) return new ApiError('badRequest')
  return new ApiError('internal')
}

function send (reply: FastifyReply, failure: ApiError): FastifyReply {
  return reply.code(failure.status).headers(failure.headers).type('application/json').send(errorBody(failure.status, failure.message))
}

/** Replaces Fastify's and Node's error replies with the Error body, everywhere. */
export function installErrorHandling (app: FastifyInstance, log: Logger): void {
  app.setErrorHandler((error: FastifyError, request: FastifyRequest, reply: FastifyReply) => {
    const failure = toApiError(error)
    if (failure.status >= 500) log.error({ reqId: request.id, err: error }, 'request failed')
    return send(reply, failure)
  })

  app.setNotFoundHandler((request, reply) => {
    const allowed = allowedMethods(request.url.split('?')[0])
    return send(reply, allowed.length > 0 ? new ApiError('methodNotAllowed', undefined, { allow: allowed.join(', ') }) : new ApiError('routeNotFound'))
  })
}

/** Answers requests that fail before Fastify sees them (malformed HTTP, oversized headers). */
export function clientErrorHandler (error: NodeJS.ErrnoException, socket: Socket): void {
  if (!socket.writable) {
    socket.destroy()
    return
  }
  const failure = error.code === 'HPE_HEADER_OVERFLOW'
    ? failures.headersTooLarge
    : error.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? failures.requestTimeout : failures.badRequest
  const body = errorBody(failure.status, failure.message)
  socket.end(`HTTP/1.1 ${failure.status} ${STATUS_CODES[failure.status] ?? ''}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
}
