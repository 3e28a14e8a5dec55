import { randomUUID } from 'node:crypto'
import Fastify, { type FastifyInstance } from 'fastify'
import pino, { type Logger } from 'pino'
import { installAuth } from './auth.js'
import type { Config } from './config.js'
import { validatorCompiler } from './contract.js'
import { ApiError, clientErrorHandler, installErrorHandling } from './errors.js'
import { parseJson } from './json.js'
import { installRateLimit } from './rate-limit.js'
import { plants } from './routes/plants.js'
import { system } from './routes/system.js'
import type { Store } from './store/store.js'

export const BODY_LIMIT = 64 * 1024

export interface AppOptions {
  config: Pick<Config, 'logLevel' | 'rateLimitPerMinute'>
  store: Store
  /** The service's logger; by default one at `config.logLevel` on stdout. */
  log?: Logger
}

/** The whole service as a Fastify instance. It never listens: the caller decides where. */
export async function buildApp ({ config, store, log = pino({ level: config.logLevel }) }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    // Fastify's own logger stays off: given one, it listens for the end of every response, at any
    // level (about 6% of a POST's CPU at LOG_LEVEL=warn). Our logger writes the request lines.
    logger: false,
    genReqId: () => randomUUID(),
    bodyLimit: BODY_LIMIT,
    clientErrorHandler,
    // Requests still arriving while closing are served, not refused with Fastify's own body.
    return503OnClosing: false
  })

  // One line per request when it completes, if the level lets it through; never a header, so
  // never a token. Below info the hook is not installed at all.
  if (log.isLevelEnabled('info')) {
    app.addHook('onResponse', (request, reply, done) => {
      log.info({
        reqId: request.id,
        method: request.method,
        route: request.routeOptions.url ?? null,
        status: reply.statusCode,
        durationMs: Math.round(reply.elapsedTime * 100) / 100
      }, 'request')
      done()
    })
  }

  app.setValidatorCompiler(validatorCompiler)
  installErrorHandling(app, log)

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
