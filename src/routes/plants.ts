import type { FastifyPluginAsync } from 'fastify'
import { route } from '../contract.js'
import { ApiError } from '../errors.js'
import type { Plant, PlantRecord, Store } from '../store/store.js'

/** Name and tag only: unknown fields in a body are neither stored nor echoed. */
function plantOf (body: Plant): Plant {
  return body.tag === undefined ? { name: body.name } : { name: body.name, tag: body.tag }
}

/** The plant, or the 404 when there is none. */
function found<T> (plant: T | undefined): T {
  if (plant === undefined) throw new ApiError('plantNotFound')
  return plant
}

function linkToNext (url: string, after: bigint): string {
  const next = new URL(url, 'http://placeholder')
  next.searchParams.set('after', after.toString())
  return `<${next.pathname}${next.search}>; rel="next"`
}

export const plants: FastifyPluginAsync<{ store: Store }> = async (app, { store }) => {
  app.route<{ Body: PlantRecord }>({
    ...route('addPlant'),
    config: { scope: 'plants:write' },
    handler: async (request) => {
      const plant = { id: request.body.id, ...plantOf(request.body) }
      if (await store.create(plant) === 'conflict') throw new ApiError('plantConflict')
      return plant // the response schema is the seed's Plant, which lists no id, so the serializer drops it
    }
  })

  app.route<{ Querystring: { limit: number, after?: bigint, tag?: string } }>({
    ...route('listPlants'),
    config: { scope: 'plants:read' },
    handler: async (request, reply) => {
      const { limit, after, tag } = request.query
      const page = await store.list({ limit: limit + 1, after, tag })
      if (page.length > limit) {
        page.length = limit
        reply.header('link', linkToNext(request.url, page[limit - 1].id))
      }
      return page
    }
  })

  app.route<{ Params: { id: bigint } }>({
    ...route('getPlant'),
    config: { scope: 'plants:read' },
    handler: async (request) => found(await store.get(request.params.id))
  })

  app.route<{ Params: { id: bigint }, Body: Plant }>({
    ...route('replacePlant'),
    config: { scope: 'plants:write' },
    handler: async (request) => found(await store.replace(request.params.id, plantOf(request.body)))
  })

  app.route<{ Params: { id: bigint } }>({
    ...route('deletePlant'),
    config: { scope: 'plants:write' },
    handler: async (request, reply) => {
      if (!await store.remove(request.params.id)) throw new ApiError('plantNotFound')
      return reply.code(204).send()
    }
  })
}
