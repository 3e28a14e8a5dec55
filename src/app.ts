import { randomUUID } from 'node:crypto'
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify'
import pino, { type DestinationStream } from 'pino'
import { installAuth } from './auth.js'
import type { Config } from './config.js'
import { validatorCompiler } from './contract.js'
import { ApiError, clientErrorHandler, installErrorHandling } from './errors.js'
import { parseJson } from './json.js'
import { installRateLimit } from './rate-limit.js'
import { plants } from './routes/plants.js'
import { system } from './routes/system.js'
import type { Store } from './store/store.js'

/** One log line per request, when it completes; never a header, so never a token. */
class RequestLog extends LogController {
  /** `enabled`: whether the level lets request lines through; below it, not even the line's object is built. */
  constructor (private readonly enabled: boolean) {
    super()
  }

  override incomingRequest (): void {}
  override requestCompleted (_error: Error | null, request: FastifyRequest, reply: FastifyReply): void {
    if (!this.enabled) return
    request.log.info({
      reqId: request.id,
      method: request.method,
      route: request.routeOptions.url ?? null,
      status: reply.statusCode,
      durationMs: Math.round(reply.elapsedTime * 100) / 100
    }, 'request')
  }
}

export const BODY_LIMIT = 64 * 1024

export interface AppOptions {
  config: Pick<Config, 'logLevel' | 'rateLimitPerMinute'>
  store: Store
  /** Where log lines go; defaults to stdout. */
  logStream?: DestinationStream
}

/** The whole service as a Fastify instance. It never listens: the caller decides where. */
export async function buildApp ({ config, store, logStream }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: { level: config.logLevel, ...(logStream === undefined ? {} : { stream: logStream }) },
    logController: new RequestLog(pino.levels.values[config.logLevel] <= pino.levels.values.info),
    genReqId: () => randomUUID(),
    // Every request logs through the one logger: Fastify's default, a child logger per request,
    // costs an object and a serialized binding each time; our lines name their request id instead.
    childLoggerFactory: logger => logger,
    bodyLimit: BODY_LIMIT,
    clientErrorHandler,
    // Requests still arriving while closing are served, not refused with Fastify's own body.
    return503OnClosing: false
  })

  app.setValidatorCompiler(validatorCompiler)
  installErrorHandling(app)

  // JSON only: any other content type is answered 415.
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request, text, done) => {
    if ((text as string).trim() === '') return done(new ApiError('emptyBody'), undefined)
    try {
      done(null, parseJson(text as string))
    } catch {
      done(new ApiError('invalidJson'), undefined)
    }
  })

  installAuth(app, store)
  installRateLimit(app, config.rateLimitPerMinute)
  await app.register(system, { store })
  await app.register(plants, { store })
  return app
}
