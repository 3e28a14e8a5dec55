// The bench's yardstick: plantstore's request work (bearer check, JSON body, NewPlant
// validation, JSON answer) on bare node:http, with no storage. Run by scripts/bench.ts.
import { createHash, timingSafeEqual } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'

const BODY_LIMIT = 64 * 1024
const BEARER = /^Bearer +(\S+) *$/i

interface Plant { name: string, tag?: string }

const expected = Buffer.from(process.env.REFERENCE_TOKEN_SHA256 ?? '', 'hex')
if (expected.length !== 32) {
  process.stderr.write('reference-server: REFERENCE_TOKEN_SHA256 must be a hex SHA-256 digest\n')
  process.exit(1)
}

const record = { id: 1, name: 'Fern', tag: 'shade' }
const page = Array.from({ length: 100 }, (_, i) => ({ id: i + 1, name: `Plant ${i + 1}`, tag: 'bench' }))

function authorized (request: IncomingMessage): boolean {
  const token = BEARER.exec(request.headers.authorization ?? '')?.[1]
  if (token === undefined) return false
  return timingSafeEqual(createHash('sha256').update(token).digest(), expected)
}

// Serialized per request, as the service does, so that only storage differs.
function send (response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body)
  response.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(text) })
  response.end(text)
}

function fail (response: ServerResponse, status: number, message: string): void {
  send(response, status, { error: status, message })
}

function newPlantOf (value: unknown): Plant | undefined {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined
  const { id, name, tag } = value as Record<string, unknown>
  if (!Number.isSafeInteger(id)) return undefined
  if (typeof name !== 'string' || name.length < 1 || name.length > 200) return undefined
  if (tag !== undefined && (typeof tag !== 'string' || tag.length > 100)) return undefined
  return tag === undefined ? { name } : { name, tag: tag as string }
}

function readBody (request: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let size = 0
    request.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size <= BODY_LIMIT) chunks.push(chunk)
    })
    request.on('end', () => resolve(size > BODY_LIMIT ? undefined : Buffer.concat(chunks).toString('utf8')))
    request.on('error', reject)
  })
}

function parse (text: string): unknown {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

async function addPlant (request: IncomingMessage, response: ServerResponse): Promise<void> {
  if (!(request.headers['content-type'] ?? '').startsWith('application/json')) return fail(response, 415, 'JSON only')
  const text = await readBody(request)
  if (text === undefined) return fail(response, 413, 'body too large')
  const plant = newPlantOf(parse(text))
  if (plant === undefined) return fail(response, 400, 'invalid body')
  send(response, 200, plant)
}

async function handle (request: IncomingMessage, response: ServerResponse): Promise<void> {
  const path = (request.url ?? '/').split('?')[0]
  if (path === '/healthz') return send(response, 200, { status: 'ok' })
  if (!path.startsWith('/plants')) return fail(response, 404, 'no such route')
  if (!authorized(request)) return fail(response, 401, 'bad token')
  if (path === '/plants' && request.method === 'POST') return await addPlant(request, response)
  if (path === '/plants' && request.method === 'GET') return send(response, 200, page)
  if (/^\/plants\/-?\d+$/.test(path) && request.method === 'GET') return send(response, 200, record)
  fail(response, 404, 'no such route')
}

const server = createServer((request, response) => {
  handle(request, response).catch(() => fail(response, 500, 'internal error'))
})
server.listen(Number(process.env.PORT ?? 0), process.env.HOST ?? '127.0.0.1')
process.once('SIGTERM', () => server.close(() => process.exit(0)))
