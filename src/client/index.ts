// The typed client, `plantstore/client`: fetch and src/json.ts only, so it runs in Node and in
// a browser bundle alike. Its types come from the OpenAPI document (./openapi.ts, generated).
import { parseJson } from '../json.js'
import type { components, operations } from './openapi.js'

type Schemas = components['schemas']
/** The seed's NewPlant, what `createPlant` sends: `{ id, name, tag? }`, the id any int64 as a bigint. */
export type NewPlant = Schemas['NewPlant']
/** A plant without its id: what `createPlant` answers (the seed's Plant) and `replacePlant` sends. */
export type Plant = Schemas['Plant']
/** A stored plant, `{ id, name, tag? }`. */
export type PlantRecord = Schemas['PlantRecord']
/** The body of every failure: `error` is the HTTP status, `message` one English sentence. */
export type ErrorBody = Schemas['Error']
/** GET /plants: `limit` plants at most (1 to 1000, default 100), only `tag`, only ids greater than `after`. */
export type ListQuery = NonNullable<operations['listPlants']['parameters']['query']>

/** One page of GET /plants; `next` is the query of its `Link: rel="next"`, while more plants remain. */
export interface Page { plants: PlantRecord[], next?: ListQuery }

export interface ClientOptions {
  /** Where the service answers, such as `http://127.0.0.1:8080`; a path prefix is kept. */
  baseUrl: string
  /** A bearer token, such as one from `plantstore tokens create`. */
  token: string
  /** The fetch to call; the global one by default. */
  fetch?: typeof fetch
}

/** Any answer other than a success: its status, its Error body and, on 429 and 503, its Retry-After. */
export class PlantstoreError extends Error {
  override readonly name = 'PlantstoreError'

  constructor (
    readonly status: number,
    /** The Error body; undefined when the answer had none (a proxy's error page, say). */
    readonly body: ErrorBody | undefined,
    /** Seconds to wait before retrying, from `Retry-After`. */
    readonly retryAfter: number | undefined,
    message = body?.message ?? `The server answered ${status} without an Error body.`
  ) {
    super(message)
  }
}

/** The id itself: a number would already have lost any id beyond 2^53, so it is refused. */
function exactId (id: bigint): bigint {
  if (typeof id !== 'bigint') throw new TypeError(`An id must be a bigint (${String(id)}n), not a ${typeof id}: a number cannot hold every int64.`)
  return id
}

/** A flat JSON object with bigints as exact integers, which JSON.stringify refuses to write. */
function toJson (members: Record<string, string | bigint | undefined>): string {
  const written = Object.entries(members).filter(([, value]) => value !== undefined)
    .map(([key, value]) => `${JSON.stringify(key)}:${typeof value === 'bigint' ? value : JSON.stringify(value)}`)
  return `{${written.join(',')}}`
}

function queryText ({ limit, tag, after }: ListQuery): string {
  const params = new URLSearchParams()
  if (limit !== undefined) params.set('limit', String(limit))
  if (tag !== undefined) params.set('tag', tag)
  if (after !== undefined) params.set('after', String(exactId(after)))
  const text = params.toString()
  return text === '' ? '' : `?${text}`
}

// RFC 8288: the target of the link whose rel, among others perhaps, is "next".
const NEXT_LINK = /<([^>]*)>[^<]*?;\s*rel\s*=\s*"?(?:[^"<]*\s)?next(?=[\s";,]|$)/i

function nextQuery (link: string | null): ListQuery | undefined {
  const target = NEXT_LINK.exec(link ?? '')?.[1]
  if (target === undefined) return undefined
  const params = new URL(target, 'http://link.invalid').searchParams
  const limit = params.get('limit')
  const tag = params.get('tag')
  const after = params.get('after')
  return {
    ...(limit !== null && { limit: Number(limit) }),
    ...(tag !== null && { tag }),
    ...(after !== null && { after: BigInt(after) })
  }
}

/** A plant as answered, its id a bigint whatever its size (the reader gives small ones as numbers). */
function toRecord (value: unknown): PlantRecord {
  const { id, ...plant } = value as { id: number | bigint }
  return { id: BigInt(id), ...toPlant(plant) }
}

function toPlant (value: unknown): Plant {
  const { name, tag } = value as Plant
  return tag === undefined ? { name } : { name, tag }
}

function failure (response: Response, text: string): PlantstoreError {
  let body: Partial<ErrorBody> | undefined
  try { body = parseJson(text) as Partial<ErrorBody> } catch { body = undefined }
  const retryAfter = response.headers.get('retry-after') ?? ''
  return new PlantstoreError(
    response.status,
    typeof body?.error === 'number' && typeof body.message === 'string' ? { error: body.error, message: body.message } : undefined,
    /^\d+$/.test(retryAfter) ? Number(retryAfter) : undefined
  )
}

/**
 * A client of the plant store. Ids go in and come out as bigints, exactly, across the whole int64
 * range; answers are read with the server's own JSON reader. Every failure throws a PlantstoreError.
 */
export function createClient ({ baseUrl, token, fetch: fetchFunction = globalThis.fetch }: ClientOptions) {
  const base = baseUrl.replace(/\/+$/, '')

  /** The answer's JSON (undefined for none) and headers; throws PlantstoreError unless it is a success. */
  async function send (method: string, path: string, body?: string): Promise<{ value: unknown, headers: Headers }> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    const response = await fetchFunction(base + path, { method, headers, body })
    const text = await response.text()
    if (!response.ok) throw failure(response, text)
    if (text === '') return { value: undefined, headers: response.headers }
    try {
      return { value: parseJson(text), headers: response.headers }
    } catch {
      throw new PlantstoreError(response.status, undefined, undefined, `The server answered ${response.status} with a body that is not JSON.`)
    }
  }

  async function listPlants (query: ListQuery = {}): Promise<Page> {
    const { value, headers } = await send('GET', `/plants${queryText(query)}`)
    const next = nextQuery(headers.get('link'))
    return { plants: (value as unknown[]).map(toRecord), ...(next !== undefined && { next }) }
  }

  return {
    /**
     * POST /plants (the seed's operation); answers the plant without its id. Sending the same id
     * with the same name and tag again is a safe retry and answers the same; with anything else it
     * throws a PlantstoreError with status 409, and the stored plant is unchanged.
     */
    async createPlant ({ id, name, tag }: NewPlant): Promise<Plant> {
      return toPlant((await send('POST', '/plants', toJson({ id: exactId(id), name, tag }))).value)
    },

    /** GET /plants/{id}; a PlantstoreError with status 404 when no plant has the id. */
    async getPlant (id: bigint): Promise<PlantRecord> {
      return toRecord((await send('GET', `/plants/${exactId(id)}`)).value)
    },

    /** One page of plants ordered by id, and the query for the next page if there is one. */
    listPlants,

    /** Every plant matching `query`, in id order, fetching `query.limit` at a time as `Link: rel="next"` leads. */
    async * plants (query: ListQuery = {}): AsyncGenerator<PlantRecord, void, undefined> {
      for (let next: ListQuery | undefined = query; next !== undefined;) {
        const page = await listPlants(next)
        yield * page.plants
        next = page.next
      }
    },

    /** PUT /plants/{id}: sets name and tag (no tag removes it); 404 when no plant has the id. */
    async replacePlant (id: bigint, { name, tag }: Plant): Promise<PlantRecord> {
      return toRecord((await send('PUT', `/plants/${exactId(id)}`, toJson({ name, tag }))).value)
    },

    /** DELETE /plants/{id}; 404 when no plant has the id. */
    async deletePlant (id: bigint): Promise<void> {
      await send('DELETE', `/plants/${exactId(id)}`)
    }
  }
}

/** What `createClient` returns. */
export type PlantstoreClient = ReturnType<typeof createClient>
