// The Fastify durable yardstick (issue 21): what POST /plants costs with this service's framework,
// contract and storage and nothing else, so that the bench can tell the service's own share.
// Fastify with the served document's route and schemas (validation and the response's
// serializer), the same JSON reader (src/json.ts), the same SQLite store (group commit, the
// change-log insert in the same transaction), the ETag and If-None-Match: * of SPEC section 9;
// auth is one header compare. No edge checks, CORS, metrics, rate limit, scopes, logging, feed or
// webhooks. With YARDSTICK=node, the same without Fastify (the node:http durable yardstick): the
// same handler, the document's validator and serializer compiled as Fastify compiles them,
// called from a plain node:http server that checks the path, the content type and the body's
// size, so that the bench can tell the framework's share from the store's. Run by
// scripts/bench.ts on the built service (`dist/`), which it imports: PLANTSTORE_ROOT names the
// checkout, DATABASE_PATH the file, YARDSTICK_TOKEN the token, PORT and HOST where to listen.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { readJsonText } from './yardstick-body.js'

const root = process.env.PLANTSTORE_ROOT ?? ''
const path = process.env.DATABASE_PATH ?? ''
const token = process.env.YARDSTICK_TOKEN ?? ''
if (root === '' || path === '' || token === '') {
  process.stderr.write('yardstick-fastify: set PLANTSTORE_ROOT (a built checkout), DATABASE_PATH and YARDSTICK_TOKEN\n')
  process.exit(1)
}
const load = async (module: string): Promise<any> => await import(pathToFileURL(join(root, module)).href)
const { route, BODY_LIMIT } = await load('dist/contract.js')
const { validatorCompiler } = await load('dist/compilers.js')
const { parseJson } = await load('dist/json.js')
const { SqliteStore } = await load('dist/store/sqlite.js')

const expected = `Bearer ${token}`
const store = new SqliteStore(path)
const addPlant = route('addPlant')
const port = Number(process.env.PORT ?? 0)
const host = process.env.HOST ?? '127.0.0.1'

interface Answer { status: number, body: unknown, etag?: string }

/** The route's work, whichever server calls it: auth, the create, and SPEC section 9's If-None-Match: * and ETag. */
async function createPlant (headers: Record<string, string | string[] | undefined>, body: { id: bigint, name: string, tag?: string }): Promise<Answer> {
  if (headers.authorization !== expected) return { status: 401, body: { error: 401, message: 'A valid bearer token is required.' } }
  const { id, name, tag } = body
  const plant = tag === undefined ? { name } : { name, tag }
  const created = await store.create({ id, ...plant })
  if (created.outcome !== 'created' && headers['if-none-match'] === '*') return { status: 412, body: { error: 412, message: 'A plant with this id exists already.' } }
  if (created.outcome === 'conflict') return { status: 409, body: { error: 409, message: 'Another plant uses this id.' } }
  return { status: 200, body: plant, etag: `"${String(created.version)}"` }
}

async function fastify (): Promise<() => Promise<void>> {
  const { default: Fastify } = await load('node_modules/fastify/fastify.js')
  const app = Fastify({ bodyLimit: BODY_LIMIT })
  app.setValidatorCompiler(validatorCompiler)
  app.removeAllContentTypeParsers()
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_request: unknown, text: string, done: (error: Error | null, value?: unknown) => void) => {
    try {
      done(null, parseJson(text))
    } catch (error) {
      done(Object.assign(error as Error, { statusCode: 400 }))
    }
  })
  app.get('/healthz', async () => ({ status: 'ok' }))
  app.route({
    ...addPlant,
    handler: async (request: { headers: Record<string, string | undefined>, body: { id: bigint, name: string, tag?: string } }, reply: any) => {
      const { status, body, etag } = await createPlant(request.headers, request.body)
      if (etag !== undefined) reply.header('etag', etag)
      return await reply.code(status).send(body)
    }
  })
  await app.listen({ port, host })
  return async () => await app.close()
}

async function node (): Promise<() => Promise<void>> {
  // As Fastify compiles them: Ajv through the service's compiler, fast-json-stringify for each answer's schema.
  const { default: stringify } = await load('node_modules/fast-json-stringify/index.js')
  const validate = validatorCompiler({ schema: addPlant.schema.body, httpPart: 'body' })
  const serializers = new Map<number, (value: unknown) => string>(Object.entries(addPlant.schema.response as Record<string, object>).map(([status, schema]) => [Number(status), stringify(schema)]))
  const send = (response: ServerResponse, status: number, body: unknown, etag?: string): void => {
    const text = serializers.get(status)?.(body) ?? JSON.stringify(body) // as Fastify: a status the document gives no schema
    response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text), ...(etag === undefined ? {} : { etag }) })
    response.end(text)
  }
  const fail = (response: ServerResponse, status: number, message: string): void => { send(response, status, { error: status, message }) }
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    if (request.url === '/healthz') return response.end('{"status":"ok"}')
    if (request.method !== 'POST' || request.url !== '/plants') return fail(response, 404, 'There is no such route.')
    readJsonText(request, response, BODY_LIMIT, fail, text => {
      let body: unknown
      try {
        body = parseJson(text)
      } catch {
        return fail(response, 400, 'The request body is not JSON.')
      }
      if (validate(body) !== true) return fail(response, 400, 'The request body is not a valid NewPlant.')
      createPlant(request.headers, body as { id: bigint, name: string, tag?: string }).then(
        ({ status, body, etag }) => { send(response, status, body, etag) },
        () => { fail(response, 503, 'The store could not write; try again.') })
    })
  })
  await new Promise<void>(resolve => server.listen(port, host, resolve))
  return async () => await new Promise<void>(resolve => {
    server.close(() => { resolve() })
    server.closeAllConnections()
  })
}

const close = process.env.YARDSTICK === 'node' ? await node() : await fastify()
process.once('SIGTERM', () => { close().then(async () => await store.close()).then(() => process.exit(0), () => process.exit(1)) })
