// The Fastify durable yardstick (issue 21): what POST /plants costs with this service's framework,
// contract and storage and nothing else, so that the bench can tell the service's own share.
// Fastify with the served document's route and schemas (validation and the response's
// serializer), the same JSON reader (src/json.ts), the same SQLite store (group commit, the
// change-log insert in the same transaction), the ETag and If-None-Match: * of SPEC section 9;
// auth is one header compare. No edge checks, CORS, metrics, rate limit, scopes, logging, feed or
// webhooks. Run by scripts/bench.ts on the built service (`dist/`), which it imports:
// PLANTSTORE_ROOT names the checkout, DATABASE_PATH the file, YARDSTICK_TOKEN the token, PORT and
// HOST where to listen.
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

const root = process.env.PLANTSTORE_ROOT ?? ''
const path = process.env.DATABASE_PATH ?? ''
const token = process.env.YARDSTICK_TOKEN ?? ''
if (root === '' || path === '' || token === '') {
  process.stderr.write('yardstick-fastify: set PLANTSTORE_ROOT (a built checkout), DATABASE_PATH and YARDSTICK_TOKEN\n')
  process.exit(1)
}
const load = async (module: string): Promise<any> => await import(pathToFileURL(join(root, 'dist', module)).href)
const { default: Fastify } = await import(pathToFileURL(join(root, 'node_modules/fastify/fastify.js')).href)
const { route, validatorCompiler } = await load('contract.js')
const { parseJson } = await load('json.js')
const { SqliteStore } = await load('store/sqlite.js')

const expected = `Bearer ${token}`
const store = new SqliteStore(path)
const app = Fastify({ bodyLimit: 64 * 1024 })
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
  ...route('addPlant'),
  handler: async (request: { headers: Record<string, string | undefined>, body: { id: bigint, name: string, tag?: string } }, reply: any) => {
    if (request.headers.authorization !== expected) return await reply.code(401).send({ error: 401, message: 'A valid bearer token is required.' })
    const { id, name, tag } = request.body
    const plant = tag === undefined ? { name } : { name, tag }
    const created = await store.create({ id, ...plant })
    // SPEC section 9: If-None-Match: * refuses an id that exists; every answer carries the plant's ETag.
    if (created.outcome !== 'created' && request.headers['if-none-match'] === '*') return await reply.code(412).send({ error: 412, message: 'A plant with this id exists already.' })
    if (created.outcome === 'conflict') return await reply.code(409).send({ error: 409, message: 'Another plant uses this id.' })
    reply.header('etag', `"${String(created.version)}"`)
    return plant
  }
})
await app.listen({ port: Number(process.env.PORT ?? 0), host: process.env.HOST ?? '127.0.0.1' })
process.once('SIGTERM', () => { app.close().then(async () => await store.close()).then(() => process.exit(0), () => process.exit(1)) })
