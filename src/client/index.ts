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

/** One change of the log: `position` is its place (and the plant's ETag after it); for a delete, `plant` is as it was. */
export interface Change { position: bigint, type: Schemas['Change']['type'], id: bigint, plant: PlantRecord, at: Date }

/** What `changes` follows: after a position (the oldest kept when absent), only a tag's plants; `signal` stops it. */
export interface ChangesQuery {
  /** Start after this position: the `Changes-Position` of a list, or the last change's `position` handled. */
  after?: bigint
  tag?: string
  /** Changes fetched per request (1 to 1000, 100 by default). */
  limit?: number
  /** Seconds a request waits for a change when there is none (0 to 60, 30 by default): the long poll. With 0 it polls, once a second at the head. */
  wait?: number
  /** Ends the iteration (it returns) when aborted. */
  signal?: AbortSignal
}

/** A plant and its ETag (`"N"`, its version), to send back in `ifMatch`. */
export interface Versioned { plant: PlantRecord, etag: string }

/** Preconditions on a plant (RFC 9110): ETags as the service answers them, several separated by commas, or '*'. */
export interface Conditions { ifMatch?: string, ifNoneMatch?: string }

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
  override readonly name: string = 'PlantstoreError'

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

/**
 * The change log no longer holds the changes after the position asked for (retention, or an
 * import started it anew): list the plants again, then follow from that list's position.
 */
export class ChangesGoneError extends PlantstoreError {
  override readonly name = 'ChangesGoneError'
}

/** The id (or position) itself: a number would already have lost any beyond 2^53, so it is refused. */
function exactId (id: bigint, what = 'An id'): bigint {
  if (typeof id !== 'bigint') throw new TypeError(`${what} must be a bigint (${String(id)}n), not a ${typeof id}: a number cannot hold every int64.`)
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

/** The `after` of a `Link: rel="next"`, exact. */
function nextAfter (link: string | null): bigint | undefined {
  const target = NEXT_LINK.exec(link ?? '')?.[1]
  const after = target === undefined ? null : new URL(target, 'http://link.invalid').searchParams.get('after')
  return after === null || !/^\d+$/.test(after) ? undefined : BigInt(after)
}

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

/** The headers that carry `conditions`; those not set are not sent. */
function conditionHeaders ({ ifMatch, ifNoneMatch }: Conditions): Record<string, string | undefined> {
  return { 'if-match': ifMatch, 'if-none-match': ifNoneMatch }
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

function toChange (value: unknown): Change {
  const { position, type, id, plant, at } = value as { position: number | bigint, type: Change['type'], id: number | bigint, plant: unknown, at: string }
  return { position: BigInt(position), type, id: BigInt(id), plant: toRecord(plant), at: new Date(at) }
}

/** `Retry-After` in seconds: as sent (delay-seconds), or until its HTTP-date; undefined when absent or unreadable. */
function retryAfterOf (header: string | null): number | undefined {
  const text = (header ?? '').trim()
  if (/^\d+$/.test(text)) return Number(text)
  const date = text === '' ? NaN : Date.parse(text)
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - Date.now()) / 1000))
}

function failure (response: Response, text: string): PlantstoreError {
  let body: Partial<ErrorBody> | undefined
  try { body = parseJson(text) as Partial<ErrorBody> } catch { body = undefined }
  return new (response.status === 410 ? ChangesGoneError : PlantstoreError)(
    response.status,
    typeof body?.error === 'number' && typeof body.message === 'string' ? { error: body.error, message: body.message } : undefined,
    retryAfterOf(response.headers.get('retry-after'))
  )
}

/** Answers `changes` waits out and asks again: rate limited, unavailable, and a gateway's "the service is not there" (502, 504). */
const PASSING_STATUSES = new Set([429, 502, 503, 504])
/** The first pause before `changes` asks again without a Retry-After; it doubles on each failure in a row, up to MAX_PAUSE_MS. */
const FIRST_PAUSE_MS = 100
const MAX_PAUSE_MS = 5000
/**
 * How often `changes` asks again while nothing is new and its answers come at once: with `wait: 0`
 * (it polls), or when something answers a long poll without holding it (a proxy, a stopping server).
 */
const POLL_PAUSE_MS = 1000
/** Seconds a `changes` request may run past its `wait` before it counts as lost (a connection that died silently) and is sent again. */
const LOST_AFTER_S = 15

/** Throws the TypeError fetch would, for a URL it cannot parse (a relative one resolves against the page, in a browser). */
function parsable (url: string): void {
  const page = (globalThis as { location?: { href?: string } }).location?.href
  if (new URL(url, page).href === '') throw new TypeError(`Not a URL: ${url}`)
}

/** Resolves after `ms`, or at once when `signal` aborts. */
async function pause (ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal?.aborted === true) return
  await new Promise<void>(resolve => {
    const done = (): void => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done)
  })
}

/**
 * A client of the plant store. Ids go in and come out as bigints, exactly, across the whole int64
 * range; answers are read with the server's own JSON reader. Every answer that is not a success
 * throws a PlantstoreError; a server that cannot be reached, or a connection cut mid-answer, throws
 * what fetch throws (a TypeError), and so may a success whose JSON is not the operation's shape
 * (something between client and server answering for it).
 */
export function createClient ({ baseUrl, token, fetch: fetchFunction = globalThis.fetch }: ClientOptions) {
  const base = baseUrl.replace(/\/+$/, '')

  /**
   * The answer's JSON (undefined for none), headers and status; throws PlantstoreError unless it
   * is a success (or a 304, which answers no value).
   */
  async function send (method: string, path: string, body?: string, conditions: Record<string, string | undefined> = {}, signal?: AbortSignal): Promise<{ value: unknown, headers: Headers, status: number }> {
    const headers: Record<string, string> = { authorization: `Bearer ${token}` }
    if (body !== undefined) headers['content-type'] = 'application/json'
    for (const [name, value] of Object.entries(conditions)) if (value !== undefined) headers[name] = value
    const response = await fetchFunction(base + path, { method, headers, body, signal })
    const text = await response.text()
    if (!response.ok && response.status !== 304) throw failure(response, text)
    if (text === '') return { value: undefined, headers: response.headers, status: response.status }
    try {
      return { value: parseJson(text), headers: response.headers, status: response.status }
    } catch {
      throw new PlantstoreError(response.status, undefined, undefined, `The server answered ${response.status} with a body that is not JSON.`)
    }
  }

  /** POST /plants: the plant created (or found identical) and its ETag. */
  async function createVersioned ({ id, name, tag }: NewPlant, { ifNoneMatch }: { ifNoneMatch?: '*' } = {}): Promise<Versioned> {
    const { value, headers } = await send('POST', '/plants', toJson({ id: exactId(id), name, tag }), { 'if-none-match': ifNoneMatch })
    return { plant: { id, ...toPlant(value) }, etag: headers.get('etag') ?? '' }
  }

  async function getVersioned (id: bigint, conditions: Conditions = {}): Promise<Versioned | 'not-modified'> {
    const { value, headers, status } = await send('GET', `/plants/${exactId(id)}`, undefined, conditionHeaders(conditions))
    return status === 304 ? 'not-modified' : { plant: toRecord(value), etag: headers.get('etag') ?? '' }
  }

  async function replaceVersioned (id: bigint, { name, tag }: Plant, conditions: Conditions = {}): Promise<Versioned> {
    const { value, headers } = await send('PUT', `/plants/${exactId(id)}`, toJson({ name, tag }), conditionHeaders(conditions))
    return { plant: toRecord(value), etag: headers.get('etag') ?? '' }
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
    async createPlant (plant: NewPlant, conditions: { ifNoneMatch?: '*' } = {}): Promise<Plant> {
      const { plant: { name, tag } } = await createVersioned(plant, conditions)
      return tag === undefined ? { name } : { name, tag }
    },

    /** `createPlant`, answering the plant with its id and its ETag (with `ifNoneMatch: '*'`, 412 when the id exists). */
    createVersioned,

    /** GET /plants/{id}; a PlantstoreError with status 404 when no plant has the id. */
    async getPlant (id: bigint): Promise<PlantRecord> {
      return toRecord((await send('GET', `/plants/${exactId(id)}`)).value)
    },

    /**
     * GET /plants/{id} with the plant's ETag; 'not-modified' (304) when `ifNoneMatch` names it:
     * the copy held is current. With `ifMatch`, 412 unless the plant is at a version it names.
     */
    getVersioned,

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

    /**
     * PUT /plants/{id}: sets name and tag (no tag removes it); 404 when no plant has the id. With
     * `ifMatch` (an ETag, several separated by commas, or '*'), 412 unless the plant is at one of
     * them; with `ifNoneMatch`, 412 if it is (with '*': if it exists).
     */
    async replacePlant (id: bigint, plant: Plant, conditions: Conditions = {}): Promise<PlantRecord> {
      return (await replaceVersioned(id, plant, conditions)).plant
    },

    /** `replacePlant`, answering the plant's new ETag too. */
    replaceVersioned,

    /** DELETE /plants/{id}; 404 when no plant has the id; with `ifMatch` or `ifNoneMatch`, 412 as for `replacePlant`. */
    async deletePlant (id: bigint, conditions: Conditions = {}): Promise<void> {
      await send('DELETE', `/plants/${exactId(id)}`, undefined, conditionHeaders(conditions))
    },

    /**
     * Every change after `after`, in order, for as long as the caller iterates: long polls of
     * GET /plants/changes, resumed after the last position read across lost connections, 429,
     * 502, 503 and 504 (after their Retry-After, else a pause doubling up to 5 s); a request
     * unanswered `wait` + 15 s is taken as lost and sent again. `signal` ends the iteration (it
     * returns) at once, even mid-request or mid-pause. Throws ChangesGoneError (410) when the log no
     * longer holds what follows, and PlantstoreError on any other refusal.
     */
    async * changes ({ after, tag, limit, wait = 30, signal }: ChangesQuery = {}): AsyncGenerator<Change, void, undefined> {
      if (after !== undefined) exactId(after, 'A position')
      parsable(`${base}/plants/changes`) // a bad baseUrl throws now, not as a network failure retried for ever
      const stopped = (): boolean => signal?.aborted === true
      let backoff = FIRST_PAUSE_MS
      while (!stopped()) {
        const params = new URLSearchParams({ wait: String(wait) })
        if (after !== undefined) params.set('after', String(after))
        if (tag !== undefined) params.set('tag', tag)
        if (limit !== undefined) params.set('limit', String(limit))
        // The request ends with the caller's signal, or once it counts as lost.
        const request = new AbortController()
        const abort = (): void => request.abort()
        const lost = setTimeout(abort, (wait + LOST_AFTER_S) * 1000)
        signal?.addEventListener('abort', abort)
        let answer: { value: unknown, headers: Headers, status: number } | undefined
        let failed: unknown
        const sentAt = Date.now()
        try {
          answer = await send('GET', `/plants/changes?${params.toString()}`, undefined, {}, request.signal)
        } catch (error) {
          failed = error
        } finally {
          clearTimeout(lost)
          signal?.removeEventListener('abort', abort)
        }
        if (answer === undefined) {
          if (stopped()) return
          const passing = request.signal.aborted || // lost
            (failed instanceof PlantstoreError ? PASSING_STATUSES.has(failed.status) : failed instanceof TypeError) // fetch's network failure
          if (!passing) throw failed
          const seconds = failed instanceof PlantstoreError ? failed.retryAfter : undefined
          await pause(seconds !== undefined ? Math.max(seconds * 1000, FIRST_PAUSE_MS) : backoff * (0.5 + Math.random() / 2), signal)
          backoff = Math.min(backoff * 2, MAX_PAUSE_MS)
          continue
        }
        backoff = FIRST_PAUSE_MS
        if (!Array.isArray(answer.value)) throw new PlantstoreError(answer.status, undefined, undefined, `The server answered ${answer.status} with something other than a page of changes.`)
        for (const change of answer.value.map(toChange)) {
          after = change.position
          yield change
        }
        const next = nextAfter(answer.headers.get('link')) ?? after
        // At the head, answered sooner than a second or the wait asked: not again at once.
        if (answer.value.length === 0 && next === after && Date.now() - sentAt < Math.max(wait * 1000, POLL_PAUSE_MS)) await pause(POLL_PAUSE_MS, signal)
        after = next
      }
    }
  }
}

/** What `createClient` returns. */
export type PlantstoreClient = ReturnType<typeof createClient>
