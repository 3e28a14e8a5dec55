import type { FastifyPluginAsync } from 'fastify'
import type { Registry } from 'prom-client'
import { document, route } from '../contract.js'
import { ApiError } from '../errors.js'
import { metricsReader } from '../metrics/cluster.js'
import type { Store } from '../store/store.js'
import { StaticFile } from './static-file.js'

/**
 * The served document, sent as bytes, so the response schema (any object) never re-serializes it;
 * no-cache: a client may keep it, and asks whether it is current (If-None-Match) before using it.
 */
const documentFile = new StaticFile('application/json; charset=utf-8', Buffer.from(JSON.stringify(document)), 'no-cache')

/** Unauthenticated routes outside the API: the contract, the probes and the metrics. */
export const system: FastifyPluginAsync<{ store: Store, metrics: Registry }> = async (app, { store, metrics }) => {
  const readMetrics = metricsReader(metrics)
  app.route({ ...route('openapiDocument'), handler: async (request, reply) => await documentFile.send(request, reply) })

  app.route({ ...route('health'), handler: async () => ({ status: 'ok' }) })

  app.route({
    ...route('ready'),
    handler: async () => {
      await store.ping() // throws StoreUnavailableError, answered 503 (anything else is a bug: 500)
      return { status: 'ready' }
    }
  })

  app.route({
    ...route('metrics'),
    handler: async (_request, reply) => {
      const text = await readMetrics().catch(() => { throw new ApiError('metricsUnavailable') })
      return reply.type(metrics.contentType).send(text)
    }
  })
}
