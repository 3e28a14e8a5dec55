import type { FastifyPluginAsync } from 'fastify'
import type { Feed } from '../changes/feed.js'
import { conditionsOf, etagOf } from '../conditions.js'
import { route } from '../contract.js'
import { ApiError } from '../errors.js'
import { isSamePlant, meets, type Created, type Plant, type PlantRecord, type Store, type VersionedPlant, type Versions } from '../store/store.js'
import { linkTo } from './links.js'

/** Name and tag only: unknown fields in a body are neither stored nor echoed. */
function plantOf (body: Plant): Plant {
  return body.tag === undefined ? { name: body.name } : { name: body.name, tag: body.tag }
}

/** A conditional write's refusal as the client sees it; otherwise the value. */
function outcome<T> (result: T | 'not-found' | 'precondition-failed'): T {
  if (result === 'not-found') throw new ApiError('plantNotFound')
  if (result === 'precondition-failed') throw new ApiError('preconditionFailed')
  return result
}

/** What a POST with If-Match finds: the plant of its id at a version the header names, the same as `plant` or not; else 412. */
function matchedOf (found: VersionedPlant | undefined, plant: Plant, ifMatch: Versions): Created {
  if (found === undefined || !meets(ifMatch, found.version)) {
    throw new ApiError('preconditionFailed', 'No plant with this id is at a version If-Match accepts; nothing was created or changed.')
  }
  return { outcome: isSamePlant({ name: found.plant.name, tag: found.plant.tag ?? null }, plant) ? 'same' : 'conflict', version: found.version }
}

export const plants: FastifyPluginAsync<{ store: Store, feed: Feed }> = async (app, { store, feed }) => {
  app.route<{ Body: PlantRecord }>({
    ...route('addPlant'),
    config: { scope: 'plants:write' },
    handler: async (request, reply) => {
      const { ifMatch, ifNoneMatch } = conditionsOf(request.headers)
      const plant = { id: request.body.id, ...plantOf(request.body) }
      // If-Match names the plant of this id at a version (RFC 9110 13.1.1: never ignored): such a
      // POST cannot create, so it only reads, and answers as a retry of that plant would.
      const created = ifMatch === undefined ? await store.create(plant) : matchedOf(await store.get(plant.id), plant, ifMatch)
      // A condition on an id that is taken fails before the data is compared: 412, not 409.
      if (ifNoneMatch !== undefined && created.outcome !== 'created' && meets(ifNoneMatch, created.version)) {
        throw new ApiError('preconditionFailed', 'A plant with this id exists already, and If-None-Match asked for none; nothing was changed.')
      }
      if (created.outcome === 'conflict') throw new ApiError('plantConflict')
      if (created.outcome === 'created') feed.written(created.version, 'plant.created')
      reply.header('etag', etagOf(created.version))
      return plant // the response schema is the seed's Plant, which lists no id, so the serializer drops it
    }
  })

  app.route<{ Querystring: { limit: number, after?: bigint, tag?: string } }>({
    ...route('listPlants'),
    config: { scope: 'plants:read' },
    handler: async (request, reply) => {
      const { limit, after, tag } = request.query
      const { plants: page, position } = await store.list({ limit: limit + 1, after, tag })
      reply.header('changes-position', position.toString())
      if (page.length > limit) {
        page.length = limit
        reply.header('link', linkTo(request.url, 'after', page[limit - 1].id))
      }
      return page
    }
  })

  app.route<{ Params: { id: bigint } }>({
    ...route('getPlant'),
    config: { scope: 'plants:read' },
    handler: async (request, reply) => {
      const { ifMatch, ifNoneMatch } = conditionsOf(request.headers)
      const found = await store.get(request.params.id)
      if (found === undefined) throw new ApiError('plantNotFound')
      reply.header('etag', etagOf(found.version))
      // RFC 9110 13.2.2: If-Match first; a read that If-None-Match matches is 304, not 412.
      if (!meets(ifMatch, found.version)) throw new ApiError('preconditionFailed', 'The plant is not at a version If-Match accepts; this answer\'s ETag is its current one.')
      if (ifNoneMatch !== undefined && meets(ifNoneMatch, found.version)) return reply.code(304).send()
      return found.plant
    }
  })

  app.route<{ Params: { id: bigint }, Body: Plant }>({
    ...route('replacePlant'),
    config: { scope: 'plants:write' },
    handler: async (request, reply) => {
      const { plant, version } = outcome(await store.replace(request.params.id, plantOf(request.body), conditionsOf(request.headers)))
      feed.written(version, 'plant.updated')
      reply.header('etag', etagOf(version))
      return plant
    }
  })

  app.route<{ Params: { id: bigint } }>({
    ...route('deletePlant'),
    config: { scope: 'plants:write' },
    handler: async (request, reply) => {
      feed.written(outcome(await store.remove(request.params.id, conditionsOf(request.headers))).position, 'plant.deleted')
      return reply.code(204).send()
    }
  })
}
