import { isUtf8 } from 'node:buffer'
import { randomBytes } from 'node:crypto'
import fastJsonStringify from 'fast-json-stringify'
import Fastify, { type FastifyInstance, type onSendHookHandler } from 'fastify'
import pino, { type Logger } from 'pino'
import { installAuth } from './auth.js'
import { Feed } from './changes/feed.js'
import type { Config } from './config.js'
import { compiledOnce, validatorCompiler } from './compilers.js'
import { BODY_LIMIT } from './contract.js'
import { corsFor } from './cors.js'
import { edgeRefusal } from './edge.js'
import { ApiError, frameworkErrorHandler, installErrorHandling, refusalReport, unroutedRefusal } from './errors.js'
import { httpServer } from './http-server.js'
import { JsonError, parseJson } from './json.js'
import { refusalCounter, requestRecorder, shedCounter } from './metrics/http.js'
import { createMetrics, type Metrics } from './metrics/metrics.js'
import { instrumentStore } from './metrics/store.js'
import { clientErrorHandler, installNodeRefusals } from './node-refusals.js'
import { RateLimiter } from './rate-limit.js'
import { docs } from './routes/docs.js'
import { changes } from './routes/changes.js'
import { plants } from './routes/plants.js'
import { system } from './routes/system.js'
import { webhooks } from './routes/webhooks.js'
import type { Store } from './store/store.js'
import { Dispatcher } from './webhooks/dispatcher.js'
import { requestsHaveProcess } from './webhooks/load.js'
import { Sender } from './webhooks/sender.js'

export interface AppOptions {
  config: Pick<Config, 'logLevel' | 'rateLimitPerMinute' | 'requestTimeout'> & Partial<Pick<Config, 'corsOrigins' | 'changesMaxReaders' | 'shutdownTimeout' | 'webhooksAllowPrivate' | 'webhooksMaxInFlight' | 'webhooksTimeout'>>
  store: Store
  /** The service's logger; by default one at `config.logLevel` on stdout. */
  log?: Logger
}

/**
 * How long a stopping server lets webhook attempts in flight finish, at most: those still running
 * are made again later (same webhook-id). Never past the time requests in flight have.
 */
const WEBHOOKS_STOP_MS = 2000

/**
 * How long into a stop of `deadlineMs` (SHUTDOWN_TIMEOUT) requests in flight, and webhook
 * attempts, may run: until a second before its end, or half of it if that is shorter, so that
 * the last commit and the exit fit in what is left.
 */
export function workMayRunMs (deadlineMs: number): number {
  return Math.max(deadlineMs - 1000, deadlineMs / 2)
}

/** True unless the content type names a charset other than UTF-8 (JSON is UTF-8, RFC 8259), once or among several. */
function isUtf8Charset (contentType: string | undefined): boolean {
  if (contentType === undefined || !contentType.includes(';')) return true
  for (const [, charset] of contentType.matchAll(/;\s*charset\s*=\s*"?([^";\s]*)/gi)) {
    if (!/^utf-?8$/i.test(charset)) return false
  }
  return true
}

/**
 * Request ids for the log: this process's random tag and a count, as unique across processes and
 * restarts as a UUID, without a UUID's formatting and random bytes per request (a measurable
 * share of a POST, docs/performance.md).
 */
function requestIds (): () => string {
  const tag = randomBytes(8).toString('hex')
  let count = 0
  return () => `${tag}-${(++count).toString(36)}`
}

/** True when a Content-Encoding header names no coding but `identity`: absent, empty, or a list of `identity` (RFC 9110 8.4). */
function isIdentityCoding (header: string | undefined): boolean {
  return header === undefined || header.split(',').every(coding => ['', 'identity'].includes(coding.trim().toLowerCase()))
}

/** A HEAD answer's last onSend: a 304, and the head of an event stream, carry no Content-Length (neither has a body of that length). */
const withoutMisstatedLength: onSendHookHandler = (_request, reply, payload, done) => {
  if (reply.statusCode === 304 || String(reply.getHeader('content-type')).startsWith('text/event-stream')) reply.removeHeader('content-length')
  done(null, payload)
}

/** The whole service as a Fastify instance. It never listens: the caller decides where. */
export async function buildApp ({ config, store: bareStore, log = pino({ level: config.logLevel }) }: AppOptions): Promise<FastifyInstance> {
  const metrics = createMetrics()
  const store = instrumentStore(bareStore, metrics)
  const cors = corsFor(config.corsOrigins ?? [])
  const refused = refusalReport(log, refusalCounter(metrics))
  const refuseBeforeRouting = frameworkErrorHandler(refused)
  const app = Fastify({
    // Fastify's own logger stays off: given one, it listens for the end of every response, at any
    // level, a measurable share of a POST (docs/performance.md). Our logger writes the request lines.
    logger: false,
    genReqId: requestIds(),
    bodyLimit: BODY_LIMIT,
    serverFactory: httpServer(config.requestTimeout * 1000, metrics.state.pipelined),
    clientErrorHandler: clientErrorHandler(refused, cors),
    // A path that cannot be routed is answered before any hook runs: its CORS headers are added here.
    frameworkErrors: cors === undefined
      ? refuseBeforeRouting
      : (error, request, reply) => {
          cors.headers(request, reply)
          refuseBeforeRouting(error, request, reply)
        },
    // Requests still arriving while closing are served, not refused with Fastify's own body.
    return503OnClosing: false
  })

  app.setValidatorCompiler(validatorCompiler)
  // Fastify's own serializer (the document passes it no shared schemas), once per distinct answer schema.
  app.setSerializerCompiler(({ schema }) => compiledOnce('answer', schema, () => fastJsonStringify(schema as fastJsonStringify.AnySchema)))
  installErrorHandling(app, log)
  installNodeRefusals(app.server, refused, cors)

  // JSON only: any other content type is answered 415. One reader for every body (src/json.ts),
  // over bytes that must be UTF-8: text that cannot be stored exactly is refused, not replaced.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, bytes, done) => {
    const body = bytes as Buffer
    if (!isUtf8Charset(request.headers['content-type'])) return done(new ApiError('unsupportedCharset'), undefined)
    if (!isIdentityCoding(request.headers['content-encoding'])) return done(new ApiError('unsupportedEncoding'), undefined)
    if (!isUtf8(body)) return done(new ApiError('invalidText'), undefined)
    const text = body.toString('utf8')
    let value: unknown
    try {
      value = parseJson(text)
    } catch (error) {
      // Only a body that cannot be read is asked whether it was blank (JSON's whitespace alone): blank
      // is none to an operation that takes none (`POST …/enable` from a client that always names JSON).
      if (/^[ \t\r\n]*$/.test(text)) return done(request.routeOptions.schema?.body === undefined ? null : new ApiError('emptyBody'), undefined)
      return done(new ApiError('invalidJson', error instanceof JsonError ? error.message : undefined), undefined)
    }
    done(null, value)
  })

  // Any other content type, or none with a body: 415, except on DELETE, which takes no body and
  // ignores whatever it is sent (the edge check has already dropped its content type).
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, _bytes, done) => {
    if (request.method === 'DELETE') return done(null, undefined)
    done(new ApiError('unsupportedMediaType'), undefined)
  })

  // The first hook of every request, routed or not, in one pass: its record starts (metrics, log
  // line); the CORS headers go on whatever will answer it, refusals included; a preflight is
  // answered; the edge checks refuse an ambiguous head before anything else, auth included; a
  // request no route takes is answered 404 or 405.
  const record = requestRecorder(metrics, log)
  app.addHook('onRequest', (request, reply, done) => {
    record(request, reply)
    if (cors !== undefined) {
      cors.headers(request, reply)
      if (cors.answeredPreflight(request, reply)) return
    }
    // A path or method no route takes is answered now, before its body is read (nor parsed, for
    // anyone, token or not): nothing it carries could change the answer.
    done(edgeRefusal(request, log) ?? (request.is404 ? unroutedRefusal(request) : undefined))
  })
  app.addHook('onError', shedCounter(metrics))
  // Fastify's HEAD routes send `Content-Length: 0` with any answer that has no body; a 304's must
  // not misstate the length of the 200 it stands for (RFC 9110 8.6), nor a stream's (it has none).
  app.addHook('onRoute', (route) => {
    if (route.method === 'HEAD') route.onSend = [...[route.onSend ?? []].flat(), withoutMisstatedLength]
  })
  // Counted for the whole service where the store is shared by instances; RATE_LIMIT_PER_MINUTE=0 turns it off.
  const limiter = config.rateLimitPerMinute === 0 ? undefined : new RateLimiter({ perMinute: config.rateLimitPerMinute, shared: store.rateWindows, log })
  if (limiter !== undefined) app.addHook('onClose', async () => limiter.close())
  const stillAllowed = installAuth(app, store, limiter === undefined ? [] : [limiter.hook])

  const feed = new Feed({ store, maxReaders: config.changesMaxReaders ?? 1000, log })
  metrics.state.changes.open = feed.open
  metrics.state.changes.written = feed.writtenByType
  metrics.state.changes.bounds = () => store.logBounds()
  // Before the server stops accepting and waits for its connections: streams end, waiting polls answer now.
  app.addHook('preClose', (done) => { feed.close(); done() })

  const dispatcher = startWebhooks(app, { store, feed, log, metrics, config })

  await app.register(system, { store, metrics: metrics.registry })
  await app.register(docs)
  await app.register(plants, { store, feed })
  await app.register(changes, { store, feed, stillAllowed, log })
  await app.register(webhooks, { webhooks: store.webhooks, allowPrivate: config.webhooksAllowPrivate ?? false, poke: () => dispatcher.poke() })
  return app
}

/**
 * The webhook dispatcher of this process, started once the app listens and stopped when it
 * closes (after the requests in flight, before the caller closes the store).
 */
function startWebhooks (app: FastifyInstance, { store, feed, log, metrics, config }: { store: Store, feed: Feed, log: Logger, metrics: Metrics, config: AppOptions['config'] }): Dispatcher {
  const timeoutMs = (config.webhooksTimeout ?? 15) * 1000
  const stopMs = Math.min(WEBHOOKS_STOP_MS, workMayRunMs((config.shutdownTimeout ?? 10) * 1000))
  const maxInFlight = config.webhooksMaxInFlight ?? 64
  const sender = new Sender({ allowPrivate: config.webhooksAllowPrivate ?? false, timeoutMs })
  const outcomes = {
    delivered: metrics.webhookAttempts.series({ outcome: 'delivered' }),
    retrying: metrics.webhookAttempts.series({ outcome: 'retrying' }),
    failed: metrics.webhookAttempts.series({ outcome: 'failed' })
  }
  const dispatcher = new Dispatcher({
    store: store.webhooks,
    feed,
    log,
    send: (delivery, now, signal) => sender.attempt(delivery, now, signal),
    timeoutMs,
    maxInFlight,
    perSubscription: Math.max(1, Math.floor(maxInFlight / 4)),
    observe: ({ delivered, nextAt, attempt }) => outcomes[delivered ? 'delivered' : nextAt === undefined ? 'failed' : 'retrying'].observe(attempt.durationMs / 1000),
    busy: requestsHaveProcess(() => metrics.state.requestsInFlight - feed.open.streams - feed.open.polls)
  })
  metrics.state.webhooks.attempts = () => dispatcher.attempts
  // One read of the store serves both gauges of a scrape, which ask for it together.
  let backlog: ReturnType<typeof store.webhooks.backlog> | undefined
  metrics.state.webhooks.backlog = () => (backlog ??= store.webhooks.backlog(new Date()).finally(() => { backlog = undefined }))
  // Once listening: an app only injected into (tests, tools) sends nothing.
  app.addHook('onListen', (done) => { dispatcher.start(); done() })
  // Stopping begins with the server's close, beside the requests that finish; the store closes after.
  let stopped: Promise<void> | undefined
  app.addHook('preClose', (done) => { stopped = dispatcher.stop(stopMs); done() })
  app.addHook('onClose', async () => {
    await (stopped ?? dispatcher.stop(stopMs))
    sender.close()
  })
  return dispatcher
}
