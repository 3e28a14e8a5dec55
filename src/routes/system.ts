import type { FastifyPluginAsync } from 'fastify'
import type { Registry } from 'prom-client'
import { document, route } from '../contract.js'
import { ApiError } from '../errors.js'
import { metricsReader } from '../metrics/cluster.js'
import type { Store } from '../store/store.js'

const documentText = JSON.stringify(document)

/** Unauthenticated routes outside the API: the contract, the probes and the metrics. */
export const system: FastifyPluginAsync<{ store: Store, metrics: Registry }> = async (app, { store, metrics }) => {
  const readMetrics = metricsReader(metrics)
  // Sent as text, so the response schema (any object) never re-serializes it.
  app.route({ ...route('openapiDocument'), handler: async (_request, reply) => reply.type('application/json').send(documentText) })

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
