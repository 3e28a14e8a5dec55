// Throughput, latency and memory of plantstore against yardsticks that do only the minimal work
// the contract allows (scripts/yardsticks.ts, issue 12): POST against the bare ceiling, the
// naive durable server, and the node:http durable and Fastify durable ones (scripts/yardstick-fastify.ts:
// this service's contract and store without and with its framework, nothing else, issue 21), GET /plants/{id} against a bare point read, the page against a bare page
// read. Commands (see also scripts/README.md):
//   npm run bench             5 rounds of get, list and post, 3 s warm-up and 10 s measured per server and round
//   npm run bench:writes      the store alone against its floor: CPU per write (scripts/bench-writes.ts)
//   BENCH_BASE=../other npm run bench   POST also on another built checkout of the service (the commit
//                             before a change, say), in the same rounds, against the same yardsticks
//   BENCH_DATABASE_URL=postgres://… npm run bench   the same scenarios on PostgreSQL, against the
//                             postgres yardstick (bare node:http, pg, the store's statements), on
//                             one and on two instances of each, a fresh schema per scenario
// Settings: BENCH_SECONDS (10)  BENCH_ROUNDS (5)  BENCH_CONNECTIONS (64)  BENCH_ONLY (get,list,post)  BENCH_SOAK_SECONDS (off)  BENCH_AS_USER (off)
//           BENCH_DATABASE_URL (unset: SQLite)  BENCH_INSTANCES (PostgreSQL: 1,2)  BENCH_YARDSTICKS (PostgreSQL: postgres; or postgres,postgres-js)
// Each scenario runs in rounds, and within a round the yardsticks and the service take turns in
// an order rotated from round to round, so that all meet the same machine and none always goes
// first: on a shared VM throughput drifts from minute to minute (docs/performance.md). Each ratio
// reported is the median of the rounds' ratios of the service to one yardstick.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { availableParallelism, cpus, loadavg, totalmem, tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { compileYardsticks } from './compile-yardsticks.js'
import { queryOnce } from './postgres-query.js'
import { openDatabase, SQLITE_BINDING } from '../src/store/sqlite-driver.js'

type ScenarioName = 'get' | 'list' | 'post'
type YardstickName = 'ceiling' | 'durable' | 'node' | 'fastify' | 'get' | 'list' | 'postgres' | 'postgres-js'
/**
 * The service as it runs; POST also with one SSE reader following its change feed, with one
 * webhook subscriber answering 204, with one whose address refuses connections, and
 * (BENCH_BASE) another build of it.
 */
type ServiceName = 'service' | 'service-sse' | 'service-hook' | 'service-hook-down' | 'base'
type ServerName = YardstickName | ServiceName

interface Options {
  seconds: number
  rounds: number
  connections: number
  only: ScenarioName[]
  soakSeconds: number
  /** PostgreSQL mode: the database in which each scenario gets a fresh schema. */
  databaseUrl?: string
  /** How many processes of each server a scenario runs at once (PostgreSQL mode only). */
  instances: number[]
  /** The yardsticks of PostgreSQL mode. */
  postgresYardsticks: YardstickName[]
}

/** One side of a comparison: a yardstick or the service, as one process or several driven at once. */
interface Contender { name: ServerName, servers: Server[], /** Its own wrk script (a token of its own store), if not the scenario's. */ script?: string }

interface Server { name: ServerName, child: ChildProcess, pid: number, port: number, output: string, exit?: string }

interface WrkStats {
  requests: number
  durationUs: number
  p50Us: number
  p99Us: number
  non2xx: number
  connect: number
  read: number
  write: number
  timeout: number
  sample?: string
}

interface Row {
  scenario: ScenarioName
  /** Processes of the server, driven at once. */
  instances: number
  round: number
  /** Its place in the round's order (1 = first). */
  turn: number
  label: string
  server: ServerName
  requests: number
  /** 2xx answers only. */
  requestsPerSecond: number
  /** Not 2xx, or a socket error (a timeout: no answer within WRK_TIMEOUT_SECONDS), while measured and in the warm-up. */
  errors: number
  warmUpErrors: number
  errorDetail?: string
  p50Ms: number
  p99Ms: number
  /** The server's CPU time (user + system, all its processes) over the measured run, per 2xx answer: less at the mercy of the machine's load than throughput. */
  cpuUsPerRequest: number
  /** RSS summed over the instances. */
  rssStartMiB: number
  rssEndMiB: number
  rssSeriesMiB: number[]
  /** The highest of the instances' peaks: a process's. */
  peakRssMiB: number
  peakRssScope: 'scenario' | 'process lifetime'
  /** Share of the server CPU's time the hypervisor gave to others meanwhile (steal): the noise floor of the round. */
  stealPercent: number
}

const ROOT = resolve(import.meta.dirname, '..')
const WARMUP_SECONDS = 3
// wrk's default of 2 s would turn a stall into an error and drop it from the latencies; with a
// longer wait the stall stays in p99, where it belongs.
const WRK_TIMEOUT_SECONDS = 10
const SEED_COUNT = 10_000
// BENCH_AS_USER=1: the service as a user runs it, logging at info with the rate limit on (above the
// bench's load); by default at warn with the rate limit off, the least it can do (issue 21 reports both).
const AS_USER = process.env.BENCH_AS_USER === '1'
const LOG_LEVEL = AS_USER ? 'info' : 'warn'
const RATE_LIMIT = AS_USER ? '100000000' : '0'
const POSTGRES_URL = process.env.BENCH_DATABASE_URL
const BASE = process.env.BENCH_BASE === undefined ? undefined : resolve(process.env.BENCH_BASE)
// On PostgreSQL nothing is pinned: the database's processes need the cores too, and two
// instances of a server must be free to use both.
const PINNED = availableParallelism() >= 2 && POSTGRES_URL === undefined
// Reads first: they then read exactly the seeded plants in the service's database too, before
// POST adds its own.
const SCENARIOS: Record<ScenarioName, { label: string, yardsticks: YardstickName[] }> = {
  get: { label: 'GET /plants/{id}', yardsticks: ['get'] },
  list: { label: 'GET /plants?limit=100', yardsticks: ['list'] },
  post: { label: 'POST /plants', yardsticks: ['ceiling', 'durable', 'node', 'fastify'] }
}
const YARDSTICKS: Record<YardstickName, string> = {
  ceiling: 'bare ceiling',
  durable: 'naive durable',
  node: 'node:http durable',
  fastify: 'Fastify durable',
  get: 'bare point read',
  list: 'bare page read',
  postgres: 'bare pg',
  'postgres-js': 'bare postgres.js'
}
const SERVICES: Record<ServiceName, string> = {
  service: 'service',
  'service-sse': 'service, one SSE reader following',
  'service-hook': 'service, one webhook subscriber',
  'service-hook-down': 'service, one webhook subscriber down',
  base: `service at ${BASE === undefined ? 'BENCH_BASE' : spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: BASE, encoding: 'utf8' }).stdout.trim()}`
}
const nameOf = (server: ServerName): string => server in SERVICES ? SERVICES[server as ServiceName] : YARDSTICKS[server as YardstickName]

/**
 * The SSE reader of 'service-sse': a process of its own (on wrk's CPU) that follows the change
 * feed, resuming with Last-Event-ID, and prints how many changes it received when stopped.
 */
const FOLLOWER = `const http = require('node:http'); const [url, token] = process.argv.slice(1); let last; let received = 0
function follow () {
  const headers = { accept: 'text/event-stream', authorization: 'Bearer ' + token, ...(last === undefined ? {} : { 'last-event-id': last }) }
  http.get(url, { headers }, (res) => {
    res.setEncoding('utf8'); let buffer = ''
    res.on('data', (chunk) => { buffer += chunk; const events = buffer.split('\\n\\n'); buffer = events.pop()
      for (const event of events) { const id = /^id: (\\d+)\\nevent: plant\\./m.exec(event); if (id !== null) { last = id[1]; received++ } } })
    res.on('end', () => setTimeout(follow, 100))
  }).on('error', () => setTimeout(follow, 100))
}
follow(); process.on('SIGTERM', () => { process.stdout.write('received ' + received + ' changes, the last at position ' + last + '\\n'); process.exit(0) })`

/** The webhook subscriber of 'service-hook': a process of its own (on wrk's CPU) that answers every delivery 204 and counts them. */
const RECEIVER = `const http = require('node:http'); let received = 0
const server = http.createServer((req, res) => { req.resume(); req.on('end', () => { received++; res.writeHead(204).end() }) })
server.listen(0, '127.0.0.1', () => process.stdout.write('port ' + server.address().port + '\\n'))
process.on('SIGTERM', () => { process.stdout.write('received ' + received + ' deliveries\\n'); process.exit(0) })`

/** The yardsticks a scenario is compared with: on PostgreSQL, the one that runs the store's statements. */
function yardsticksOf (scenario: ScenarioName, options: Options): YardstickName[] {
  return options.databaseUrl === undefined ? SCENARIOS[scenario].yardsticks : options.postgresYardsticks
}
/** Issue 12's targets: the service's median ratio to each yardstick, its p99 and its peak memory. */
const TARGETS = {
  ratio: { 'post/ceiling': 0.8, 'post/durable': 1.0, 'post/fastify': 0.9, 'get/get': 0.95, 'list/list': 0.7, 'post/postgres': 0.7 } as Record<string, number | undefined>,
  p99Ms: 10,
  peakRssMiB: 120
}

const children = new Set<ChildProcess>()
/** Every server started, for the report of what they logged and how they ended. */
const started: Server[] = []
const tempDirs: string[] = []
let runNumber = 0

function positive (name: string, fallback: number): number {
  const text = process.env[name] ?? String(fallback)
  if (!/^\d+$/.test(text) || Number(text) === 0) throw new Error(`${name} must be a positive whole number, not "${text}"`)
  return Number(text)
}

function readOptions (): Options {
  const asked = (process.env.BENCH_ONLY ?? 'get,list,post').split(',').map(s => s.trim()).filter(Boolean)
  const unknown = asked.find(s => !(s in SCENARIOS))
  if (unknown !== undefined || asked.length === 0) throw new Error(`BENCH_ONLY takes a comma list of get, list, post, not "${process.env.BENCH_ONLY}"`)
  const only = (Object.keys(SCENARIOS) as ScenarioName[]).filter(s => asked.includes(s))
  const soakSeconds = process.env.BENCH_SOAK_SECONDS === undefined ? 0 : positive('BENCH_SOAK_SECONDS', 0)
  if (POSTGRES_URL !== undefined && !/^postgres(ql)?:\/\//.test(POSTGRES_URL)) throw new Error(`BENCH_DATABASE_URL must be a postgres:// URL, not "${POSTGRES_URL}"`)
  const instancesText = process.env.BENCH_INSTANCES ?? (POSTGRES_URL === undefined ? '1' : '1,2')
  const instances = instancesText.split(',').map(n => Number(n.trim()))
  if (instances.some(n => !Number.isInteger(n) || n < 1) || (POSTGRES_URL === undefined && instancesText !== '1')) {
    throw new Error(`BENCH_INSTANCES takes a comma list of counts such as 1,2, and only with BENCH_DATABASE_URL; not "${instancesText}"`)
  }
  if (POSTGRES_URL !== undefined && soakSeconds > 0) throw new Error('BENCH_SOAK_SECONDS is for SQLite only')
  const postgresYardsticks = (process.env.BENCH_YARDSTICKS ?? 'postgres').split(',').map(name => name.trim()) as YardstickName[]
  if (postgresYardsticks.some(name => name !== 'postgres' && name !== 'postgres-js') || (POSTGRES_URL === undefined && process.env.BENCH_YARDSTICKS !== undefined)) {
    throw new Error(`BENCH_YARDSTICKS takes postgres and postgres-js, and only with BENCH_DATABASE_URL; not "${process.env.BENCH_YARDSTICKS}"`)
  }
  return { seconds: positive('BENCH_SECONDS', 10), rounds: positive('BENCH_ROUNDS', 5), connections: positive('BENCH_CONNECTIONS', 64), only, soakSeconds, databaseUrl: POSTGRES_URL, instances, postgresYardsticks }
}

function checkTools (): void {
  if (spawnSync('wrk', ['-v']).error !== undefined) throw new Error('wrk is not installed; install it with: apt-get install wrk')
  if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing; run npm run build first')
  if (BASE !== undefined && !existsSync(join(BASE, 'dist/cli/main.js'))) throw new Error(`BENCH_BASE=${BASE} holds no built service (dist/cli/main.js); run npm ci there first`)
}

function tempDir (): string {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-bench-'))
  tempDirs.push(dir)
  return dir
}

/** The command, run on one CPU when there are two or more: servers on 0, wrk on 1. */
function pinned (cpu: number, command: string[]): string[] {
  return PINNED ? ['taskset', '-c', String(cpu), ...command] : command
}

function track (child: ChildProcess): ChildProcess {
  children.add(child)
  child.once('exit', () => children.delete(child))
  return child
}

function capture (child: ChildProcess): string[] {
  const output: string[] = []
  for (const stream of [child.stdout, child.stderr]) stream?.setEncoding('utf8').on('data', (text: string) => output.push(text))
  return output
}

function linesOf (output: string[]): string[] {
  return output.join('').split('\n').filter(line => line.trim() !== '')
}

/**
 * A server's output goes to a file, not through this process: a service at `info` writes a line
 * a request, millions in a run, and reading them here took CPU time beside the servers and wrk
 * (their turns, and so their CPU per answer, moved with it). The log's cost to the service (its
 * lines and their writes) is measured all the same. The file is read when the bench reports.
 */
function outputFile (name: string): { path: string, fd: number } {
  const path = join(tempDir(), `${name}.out`)
  return { path, fd: openSync(path, 'w') }
}

/** A file's count of lines, its first `head` and its last `tail`, read a block at a time. */
function summarize (path: string, head = 10, tail = 20): { lines: number, first: string[], last: string[] } {
  const fd = openSync(path, 'r')
  const block = Buffer.alloc(1 << 20)
  let lines = 0
  let first = ''
  let last = ''
  try {
    for (let read; (read = readSync(fd, block)) > 0;) {
      const chunk = block.subarray(0, read)
      for (let at = chunk.indexOf(10); at !== -1; at = chunk.indexOf(10, at + 1)) lines++
      const text = chunk.toString('utf8')
      if (first.length < 64 * 1024) first += text
      last = (last + text).slice(-64 * 1024)
    }
  } finally {
    closeSync(fd)
  }
  const nonEmpty = (text: string): string[] => text.split('\n').filter(line => line.trim() !== '')
  return { lines, first: nonEmpty(first).slice(0, head), last: nonEmpty(last).slice(-tail) }
}

function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}

async function healthy (port: number): Promise<boolean> {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/healthz`)
    await response.arrayBuffer()
    return response.status === 200
  } catch {
    return false
  }
}

async function waitHealthy (server: Server): Promise<void> {
  const deadline = Date.now() + 20_000
  while (!await healthy(server.port)) {
    if (server.exit !== undefined) throw new Error(`${server.name} exited (${server.exit}) before answering /healthz:\n${summarize(server.output).last.join('\n')}`)
    if (Date.now() > deadline) throw new Error(`${server.name} did not answer /healthz within 20 s`)
    await sleep(100)
  }
}

async function startServer (name: ServerName, args: string[], env: Record<string, string>, cwd = ROOT): Promise<Server> {
  const port = await freePort()
  const [command, ...rest] = pinned(0, [process.execPath, ...args])
  // A clean environment: nothing of npm's or tsx's (NODE_OPTIONS) reaches the servers.
  const output = outputFile(name)
  const child = track(spawn(command, rest, { cwd, env: { PATH: process.env.PATH ?? '', ...env, PORT: String(port) }, stdio: ['ignore', output.fd, output.fd] }))
  closeSync(output.fd) // the child has its own
  const server: Server = { name, child, pid: child.pid ?? 0, port, output: output.path }
  started.push(server)
  child.once('exit', (code, signal) => { server.exit = signal ?? `code ${code}` })
  await waitHealthy(server)
  return server
}

function createToken (databaseUrl: string, root = ROOT, name = 'bench', scope?: string): string {
  const run = spawnSync(process.execPath, ['dist/cli/main.js', 'tokens', 'create', '--name', name, ...(scope === undefined ? [] : ['--scope', scope])], { cwd: root, env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl }, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`tokens create failed: ${run.stderr}`)
  return run.stdout.trim()
}

/** The yardsticks compiled (compile-yardsticks.ts), into node_modules/.cache so that they find better-sqlite3. */
function compiledYardsticks (): string {
  mkdirSync(join(ROOT, 'node_modules/.cache'), { recursive: true })
  const dir = mkdtempSync(join(ROOT, 'node_modules/.cache/plantstore-bench-'))
  tempDirs.push(dir)
  compileYardsticks(ROOT, dir)
  return join(dir, 'yardsticks.js')
}

/** The plants the bench seeds into the service over HTTP, written straight into the readers' file. */
function seedFile (path: string): void {
  const db = openDatabase(path)
  db.pragma('journal_mode = WAL')
  db.exec('CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tag TEXT)')
  const insert = db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)')
  db.transaction(() => { for (let id = 1; id <= SEED_COUNT; id++) insert.run(id, `Seed ${id}`, 'seed') })()
  db.pragma('wal_checkpoint(TRUNCATE)')
  db.close()
}

/** `database`: the directory of the SQLite yardsticks' files, or the postgres yardstick's URL. */
async function startYardstick (name: YardstickName, script: string, token: string, database: string): Promise<Server> {
  // The yardsticks are compiled on their own, outside src/: they load the SQLite binding the service's driver picks.
  const env: Record<string, string> = { HOST: '127.0.0.1', YARDSTICK: name, YARDSTICK_TOKEN: token, SQLITE_BINDING }
  if (name === 'postgres' || name === 'postgres-js') env.DATABASE_URL = database
  else if (name !== 'ceiling') env.DATABASE_PATH = join(database, name === 'durable' || name === 'node' || name === 'fastify' ? `${name}.db` : 'seeded.db')
  // The Fastify durable yardstick (and, YARDSTICK=node, the same without Fastify) is a script of its own, on the built
  // service's modules (scripts/yardstick-fastify.ts), run with the service's Node flags (npm start's heap settings): it
  // differs from the service only in the work per request.
  if (name === 'fastify' || name === 'node') return await startServer(name, [...SERVICE_NODE_FLAGS, join(dirname(script), 'yardstick-fastify.js')], { ...env, PLANTSTORE_ROOT: ROOT })
  return await startServer(name, [script], env)
}

/** The arguments after `node` in `npm start`: the bench runs the service as it ships, V8 flags included. */
function startArguments (): string[] {
  const start: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start
  const words = start.split(/\s+/)
  const [command, ...args] = words[0] === 'exec' ? words.slice(1) : words // exec: the shell hands its process to node
  if (command !== 'node') throw new Error(`npm start should run node (or exec node), not "${start}"`)
  return args
}

const SERVICE_ARGUMENTS = startArguments()
/** Node's own flags in `npm start`, before the script. */
const SERVICE_NODE_FLAGS = SERVICE_ARGUMENTS.slice(0, SERVICE_ARGUMENTS.findIndex(arg => !arg.startsWith('-')))

async function startService (databaseUrl: string, name: ServiceName = 'service', token?: string): Promise<Server> {
  const hooked = name === 'service-hook' || name === 'service-hook-down'
  const env = { HOST: '127.0.0.1', DATABASE_URL: databaseUrl, LOG_LEVEL, RATE_LIMIT_PER_MINUTE: RATE_LIMIT, ...(hooked ? { WEBHOOKS_ALLOW_PRIVATE: 'true' } : {}) }
  const server = await startServer(name, SERVICE_ARGUMENTS, env, name === 'base' ? BASE : ROOT)
  const beside = (script: string, ...args: string[]): { child: ChildProcess, output: string[] } => {
    const [command, ...rest] = pinned(1, [process.execPath, '-e', script, ...args])
    const child = track(spawn(command, rest, { env: { PATH: process.env.PATH ?? '' }, stdio: ['ignore', 'pipe', 'pipe'] }))
    const helper = { server, child, output: capture(child) }
    followers.push(helper)
    return helper
  }
  if (name === 'service-sse' && token !== undefined) beside(FOLLOWER, `http://127.0.0.1:${server.port}/plants/changes`, token)
  if (hooked) {
    let url = `http://127.0.0.1:${await freePort()}/down` // nothing listens there
    if (name === 'service-hook') {
      const receiver = beside(RECEIVER)
      for (const until = Date.now() + 10_000; !/port \d+/.test(receiver.output.join('')); await sleep(20)) if (Date.now() > until) throw new Error('the webhook receiver did not start')
      url = `http://127.0.0.1:${/port (\d+)/.exec(receiver.output.join(''))?.[1]}/hook`
    }
    const admin = createToken(databaseUrl, ROOT, 'bench-admin', 'admin')
    const subscribed = await fetch(`http://127.0.0.1:${server.port}/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' }, body: JSON.stringify({ url }) })
    if (subscribed.status !== 201) throw new Error(`subscribing ${url} failed: ${subscribed.status} ${await subscribed.text()}`)
  }
  return server
}

/** The SSE readers of 'service-sse', and what they printed when stopped. */
const followers: Array<{ server: Server, child: ChildProcess, output: string[] }> = []

/** One seeded plant; a 503 is retried after its Retry-After, as the contract asks of clients (the same plant again is a safe retry). */
async function postPlant (port: number, token: string, id: number, attempt = 1): Promise<void> {
  const response = await fetch(`http://127.0.0.1:${port}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ id, name: `Seed ${id}`, tag: 'seed' })
  })
  const text = await response.text()
  if (response.status === 503 && attempt < 5) {
    await sleep(Number(response.headers.get('retry-after') ?? 1) * 1000)
    return await postPlant(port, token, id, attempt + 1)
  }
  if (response.status !== 200) throw new Error(`seeding plant ${id}: ${response.status} ${text}`)
}

async function seed (port: number, token: string): Promise<void> {
  let next = 1
  const worker = async (): Promise<void> => {
    while (next <= SEED_COUNT) await postPlant(port, token, next++)
  }
  await Promise.all(Array.from({ length: 16 }, worker))
}

const LUA_COMMON = `
local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  -- ids: the run's base (argument 1) + a billion per thread, so none repeats
  base = tonumber(args[1]) + tid * 1000000000
  counter = 0
  bad = 0
  math.randomseed(base)
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = bad + 1
    if sample == nil then sample = status .. " " .. string.sub(body or "", 1, 300) end
  end
end

function done(summary, latency, requests)
  local non2xx, first = 0, nil
  for _, thread in ipairs(threads) do
    non2xx = non2xx + thread:get("bad")
    first = first or thread:get("sample")
  end
  local e = summary.errors
  io.write(string.format('BENCH_JSON {"requests":%d,"durationUs":%d,"p50Us":%.0f,"p99Us":%.0f,"non2xx":%d,"connect":%d,"read":%d,"write":%d,"timeout":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), non2xx, e.connect, e.read, e.write, e.timeout))
  if first then io.write("BENCH_SAMPLE " .. first .. "\\n") end
end
`

const LUA_REQUEST: Record<ScenarioName, string> = {
  post: `
wrk.headers["Content-Type"] = "application/json"
function request()
  counter = counter + 1
  local body = '{"id":' .. string.format("%.0f", base + counter) .. ',"name":"Plant ' .. counter .. '","tag":"bench"}'
  return wrk.format("POST", "/plants", nil, body)
end
`,
  get: `
function request()
  return wrk.format("GET", "/plants/" .. math.random(1, ${SEED_COUNT}))
end
`,
  list: `
function request()
  return wrk.format("GET", "/plants?limit=100")
end
`
}

function writeLua (dir: string, scenario: ScenarioName, token: string): string {
  const file = join(dir, `${scenario}.lua`)
  writeFileSync(file, `wrk.headers["Authorization"] = "Bearer ${token}"\n${LUA_REQUEST[scenario]}${LUA_COMMON}`)
  return file
}

function parseWrk (stdout: string): WrkStats {
  const json = /^BENCH_JSON (.*)$/m.exec(stdout)?.[1]
  if (json === undefined) throw new Error(`wrk printed no results:\n${stdout}`)
  const sample = /^BENCH_SAMPLE (.*)$/m.exec(stdout)?.[1]
  return { ...JSON.parse(json), sample }
}

function wrk (port: number, script: string, seconds: number, connections: number): Promise<WrkStats> {
  runNumber += 1
  const base = runNumber * 10_000_000_000 // a distinct id range per run, well above the seeded ids
  const args = ['-t1', `-c${connections}`, `-d${seconds}s`, '--timeout', `${WRK_TIMEOUT_SECONDS}s`, '--latency', '-s', script, `http://127.0.0.1:${port}`, '--', String(base)]
  const [command, ...rest] = pinned(1, ['wrk', ...args])
  const child = track(spawn(command, rest, { stdio: ['ignore', 'pipe', 'pipe'] }))
  const output = capture(child)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('close', code => {
      if (code !== 0) return reject(new Error(`wrk exited with ${code}:\n${output.join('')}`))
      try {
        resolve(parseWrk(output.join('')))
      } catch (error) {
        reject(error)
      }
    })
  })
}

/**
 * wrk on every server of a contender at once, the connections shared out among them. Counts are
 * summed; the duration is the runs' mean (they differ by milliseconds), p50 the mean of theirs
 * weighted by requests, p99 the higher.
 */
async function wrkAll (servers: Server[], script: string, seconds: number, connections: number): Promise<WrkStats> {
  const each = await Promise.all(servers.map(server => wrk(server.port, script, seconds, Math.max(1, Math.floor(connections / servers.length)))))
  if (each.length === 1) return each[0]
  const sum = (key: 'requests' | 'non2xx' | 'connect' | 'read' | 'write' | 'timeout'): number => each.reduce((n, stats) => n + stats[key], 0)
  const requests = sum('requests')
  return {
    requests,
    durationUs: each.reduce((n, stats) => n + stats.durationUs, 0) / each.length,
    p50Us: each.reduce((n, stats) => n + stats.p50Us * stats.requests, 0) / Math.max(1, requests),
    p99Us: Math.max(...each.map(stats => stats.p99Us)),
    non2xx: sum('non2xx'),
    connect: sum('connect'),
    read: sum('read'),
    write: sum('write'),
    timeout: sum('timeout'),
    sample: each.find(stats => stats.sample !== undefined)?.sample
  }
}

/** Successful answers a second: a 503 or a timeout is not throughput. */
function perSecond (stats: WrkStats): number {
  return Math.round((stats.requests - stats.non2xx) / (stats.durationUs / 1e6))
}

/** Answers that were not 2xx and socket errors (timeouts included), in one count. */
function errorsOf (stats: WrkStats): number {
  return stats.non2xx + stats.connect + stats.read + stats.write + stats.timeout
}

function describeErrors (stats: WrkStats): string {
  return `${stats.non2xx} not 2xx (first: ${stats.sample ?? 'none'}); socket errors: connect ${stats.connect}, read ${stats.read}, write ${stats.write}, timeout ${stats.timeout}`
}

/**
 * Errors are counted and reported, not fatal: a server that stalls or sheds load under the
 * bench is a finding, and the other rounds still count. Only a run with no success at all, or
 * mostly failures (a broken setup: a wrong token, a dead server), stops the bench.
 */
function check (stats: WrkStats, what: string): WrkStats {
  if (stats.requests === 0 || errorsOf(stats) > stats.requests / 2) throw new Error(`${what}: ${stats.requests} requests, ${describeErrors(stats)}`)
  if (errorsOf(stats) > 0) process.stderr.write(`${what}: ${describeErrors(stats)}\n`)
  return stats
}

function statusMiB (pid: number, field: 'VmRSS' | 'VmHWM'): number {
  try {
    const kib = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
    return kib === undefined ? Number.NaN : Math.round(Number(kib) / 1024 * 10) / 10
  } catch {
    return Number.NaN
  }
}

/** Starts VmHWM afresh (Linux ≥ 4.0), so the peak is this scenario's; false if not allowed. */
function resetPeak (pid: number): boolean {
  try {
    writeFileSync(`/proc/${pid}/clear_refs`, '5')
    return true
  } catch {
    return false
  }
}

/** The servers' CPU's tick counters from /proc/stat (all CPUs' when nothing is pinned): [total, steal]. */
function cpuTicks (): [number, number] {
  const line = readFileSync('/proc/stat', 'utf8').split('\n').find(l => l.startsWith(`cpu${PINNED ? 0 : ''} `))
  const fields = (line ?? '').trim().split(/\s+/).slice(1, 9).map(Number) // user nice system idle iowait irq softirq steal
  return [fields.reduce((sum, n) => sum + n, 0), fields[7] ?? Number.NaN]
}

const CLOCK_TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim() ?? '') || 100

/** A process's CPU time so far, user + system, in µs (from /proc/PID/stat: utime and stime, the 12th and 13th fields after the name). */
function cpuUsOf (pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS * 1e6
  } catch {
    return Number.NaN
  }
}

/** Samples the processes' VmRSS, summed, now and every `everyMs`; the returned function stops and gives the series. */
function sampleRss (pids: number[], everyMs: number): () => number[] {
  const total = (): number => Math.round(pids.reduce((sum, pid) => sum + statusMiB(pid, 'VmRSS'), 0) * 10) / 10
  const series = [total()]
  const timer = setInterval(() => series.push(total()), everyMs)
  return () => {
    clearInterval(timer)
    return [...series, total()]
  }
}

function labelOf (scenario: ScenarioName, instances: number, options: Options): string {
  return options.databaseUrl === undefined ? SCENARIOS[scenario].label : `${SCENARIOS[scenario].label}, ${instances === 1 ? 'one instance' : `${instances} instances`}`
}

async function measure (contender: Contender, scenario: ScenarioName, instances: number, round: number, turn: number, script: string, options: Options): Promise<Row> {
  const { name, servers } = contender
  script = contender.script ?? script
  const label = labelOf(scenario, instances, options)
  const what = `${label} on the ${nameOf(name)}, round ${round}`
  process.stderr.write(`${what}: ${WARMUP_SECONDS} s warm-up, ${options.seconds} s measured\n`)
  const scoped = servers.map(server => resetPeak(server.pid)).every(Boolean)
  const warmUp = check(await wrkAll(servers, script, WARMUP_SECONDS, options.connections), `${what} (warm-up)`)
  const stop = sampleRss(servers.map(server => server.pid), 1000)
  const ticksBefore = cpuTicks()
  const cpuBefore = servers.reduce((sum, server) => sum + cpuUsOf(server.pid), 0)
  const stats = check(await wrkAll(servers, script, options.seconds, options.connections), what)
  const cpuUsed = servers.reduce((sum, server) => sum + cpuUsOf(server.pid), 0) - cpuBefore
  const series = stop()
  const ticksAfter = cpuTicks()
  const stealPercent = Math.round((ticksAfter[1] - ticksBefore[1]) / (ticksAfter[0] - ticksBefore[0]) * 1000) / 10
  return {
    scenario,
    instances,
    round,
    turn,
    label,
    server: name,
    requests: stats.requests,
    requestsPerSecond: perSecond(stats),
    errors: errorsOf(stats),
    warmUpErrors: errorsOf(warmUp),
    errorDetail: errorsOf(stats) + errorsOf(warmUp) > 0 ? `measured: ${describeErrors(stats)}; warm-up: ${describeErrors(warmUp)}` : undefined,
    p50Ms: stats.p50Us / 1000,
    p99Ms: stats.p99Us / 1000,
    cpuUsPerRequest: Math.round(cpuUsed / Math.max(1, stats.requests - stats.non2xx) * 10) / 10,
    rssStartMiB: series[0],
    rssEndMiB: series[series.length - 1],
    peakRssMiB: Math.max(...servers.map(server => statusMiB(server.pid, 'VmHWM'))),
    peakRssScope: scoped ? 'scenario' : 'process lifetime',
    rssSeriesMiB: series,
    stealPercent
  }
}

function median (values: number[]): number {
  const sorted = [...values].sort((x, y) => x - y)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

const round3 = (n: number): number => Math.round(n * 1000) / 1000

/** A comparison: the service against one yardstick in one scenario, e.g. 'post/ceiling', on so many instances of each. */
interface Comparison {
  key: string
  scenario: ScenarioName
  instances: number
  /** Which build of the service, or the service with an SSE reader. */
  service: ServiceName
  yardstick: YardstickName
  rounds: number[]
  median: number
  /** The median of the rounds' CPU per request, the service's over the yardstick's. */
  cpuPerRequest: number
  target?: number
  met?: boolean
}

/** The service's throughput over the yardstick's in one round of a scenario. */
function roundRatio (rows: Row[], scenario: ScenarioName, instances: number, yardstick: YardstickName, round: number, serviceName: ServiceName = 'service'): number | undefined {
  const of = (server: ServerName): number | undefined =>
    rows.find(r => r.scenario === scenario && r.instances === instances && r.server === server && r.round === round)?.requestsPerSecond
  const [service, other] = [of(serviceName), of(yardstick)]
  return service === undefined || other === undefined ? undefined : round3(service / other)
}

function comparisons (rows: Row[], options: Options): Comparison[] {
  const services = (Object.keys(SERVICES) as ServiceName[]).filter(name => rows.some(r => r.server === name))
  return options.instances.flatMap(instances => options.only.flatMap(scenario => services.flatMap(service => yardsticksOf(scenario, options).flatMap((yardstick): Comparison[] => {
    const rounds = Array.from({ length: options.rounds }, (_, i) => roundRatio(rows, scenario, instances, yardstick, i + 1, service))
      .filter((ratio): ratio is number => ratio !== undefined)
    if (rounds.length === 0) return []
    const key = `${scenario}/${yardstick}`
    const value = round3(median(rounds))
    // The targets are the service's own; the other builds and setups are figures beside it.
    const target = service === 'service' ? TARGETS.ratio[key] : undefined
    const cpuOf = (server: ServerName, round: number): number | undefined =>
      rows.find(r => r.scenario === scenario && r.instances === instances && r.server === server && r.round === round)?.cpuUsPerRequest
    const cpu = Array.from({ length: options.rounds }, (_, i) => (cpuOf(service, i + 1) ?? Number.NaN) / (cpuOf(yardstick, i + 1) ?? Number.NaN)).filter(Number.isFinite)
    return [{ key, scenario, instances, service, yardstick, rounds, median: value, cpuPerRequest: round3(median(cpu)), target, met: target === undefined ? undefined : value >= target }]
  }))))
}

/** What a webhook subscriber costs POST: the service with one over the service without, per round, in the same run (issue 19: ≥ 0.9). */
interface WebhookCost { service: ServiceName, rounds: number[], median: number, met: boolean }

function webhookCosts (rows: Row[], options: Options): WebhookCost[] {
  const hooked: ServiceName[] = ['service-hook', 'service-hook-down']
  return hooked.filter(name => rows.some(r => r.server === name)).map(service => {
    const of = (server: ServerName, round: number): number | undefined => rows.find(r => r.scenario === 'post' && r.server === server && r.round === round)?.requestsPerSecond
    const ratios = Array.from({ length: options.rounds }, (_, i) => (of(service, i + 1) ?? Number.NaN) / (of('service', i + 1) ?? Number.NaN)).filter(Number.isFinite).map(round3)
    const value = round3(median(ratios))
    return { service, rounds: ratios, median: value, met: value >= 0.9 }
  })
}

interface Limits { scenario: ScenarioName, instances: number, p99Ms: { median: number, max: number, met: boolean }, peakRssMiB: { median: number, max: number, met: boolean } }

/** Per scenario: the service's p99 and peak RSS, medians over the rounds (and the worst round), against the targets. */
function serviceLimits (rows: Row[], options: Options): Limits[] {
  return options.instances.flatMap(instances => options.only.map(scenario => {
    const service = rows.filter(r => r.scenario === scenario && r.instances === instances && r.server === 'service')
    const p99 = service.map(r => r.p99Ms)
    const peak = service.map(r => r.peakRssMiB)
    return {
      scenario,
      instances,
      p99Ms: { median: median(p99), max: Math.max(...p99), met: median(p99) <= TARGETS.p99Ms },
      peakRssMiB: { median: median(peak), max: Math.max(...peak), met: median(peak) <= TARGETS.peakRssMiB }
    }
  }))
}

const met = (yes: boolean): string => yes ? 'met' : '**not met**'

function markdown (header: string[], cells: string[][]): string {
  return [header, header.map(() => '---'), ...cells].map(c => `| ${c.join(' | ')} |`).join('\n')
}

function printTables (rows: Row[], compared: Comparison[], limits: Limits[], options: Options): void {
  const ratioOf = (r: Row): string => r.server in SERVICES ? '' : (roundRatio(rows, r.scenario, r.instances, r.server as YardstickName, r.round)?.toFixed(3) ?? '')
  console.log(markdown(
    ['scenario', 'round', 'turn', 'server', 'req/s', 'errors (warm-up)', 'p50 ms', 'p99 ms', 'CPU µs/req', 'RSS start→end MiB', 'peak RSS MiB', PINNED ? 'CPU 0 steal %' : 'steal %', 'service / this'],
    rows.map(r => [r.label, String(r.round), String(r.turn), nameOf(r.server), String(r.requestsPerSecond), `${r.errors} (${r.warmUpErrors})`,
      r.p50Ms.toFixed(2), r.p99Ms.toFixed(2), r.cpuUsPerRequest.toFixed(1), `${r.rssStartMiB.toFixed(1)} → ${r.rssEndMiB.toFixed(1)}`, r.peakRssMiB.toFixed(1), r.stealPercent.toFixed(1), ratioOf(r)])))
  console.log('')
  console.log(markdown(['the service against', 'ratio per round', 'median', 'target', '', 'CPU per request: service ÷ this (median)'],
    compared.map(c => [`${labelOf(c.scenario, c.instances, options)}${c.service === 'service' ? '' : ` (${SERVICES[c.service]})`} vs ${YARDSTICKS[c.yardstick]}`, c.rounds.map(n => n.toFixed(3)).join(', '), `**${c.median.toFixed(3)}**`,
      c.target === undefined ? '—' : `≥ ${c.target}`, c.met === undefined ? '' : met(c.met), c.cpuPerRequest.toFixed(2)])))
  console.log('')
  console.log(markdown(['service', 'p99 ms: median (worst round)', `target ≤ ${TARGETS.p99Ms}`, 'peak RSS MiB: median (worst round)', `target ≤ ${TARGETS.peakRssMiB}`],
    limits.map(l => [labelOf(l.scenario, l.instances, options), `${l.p99Ms.median.toFixed(2)} (${l.p99Ms.max.toFixed(2)})`, met(l.p99Ms.met),
      `${l.peakRssMiB.median.toFixed(1)} (${l.peakRssMiB.max.toFixed(1)})`, met(l.peakRssMiB.met)])))
}

function growthVerdict (series: number[]): { grew: boolean | undefined, text: string } {
  const third = Math.floor(series.length / 3)
  if (third === 0) return { grew: undefined, text: 'too few samples to judge growth (soak at least 15 s)' }
  const first = Math.max(...series.slice(0, third))
  const last = Math.max(...series.slice(-third))
  const grew = last > first * 1.1
  return { grew, text: `last third's max ${last} MiB vs first third's max ${first} MiB: ${grew ? 'GREW by more than 10%' : 'no growth beyond 10%'}` }
}

async function soak (service: Server, script: string, seconds: number, options: Options): Promise<object> {
  process.stderr.write(`soak: POST /plants on the service for ${seconds} s\n`)
  const stop = sampleRss([service.pid], 5000)
  const stats = check(await wrk(service.port, script, seconds, options.connections), 'soak POST /plants on the service')
  const series = stop()
  const verdict = growthVerdict(series)
  console.log(`\nSoak (${seconds} s POST /plants, service, VmRSS every 5 s, MiB): ${series.join(', ')}`)
  console.log(`Soak: ${perSecond(stats)} req/s; ${verdict.text}`)
  return { seconds, requests: stats.requests, rssSeriesMiB: series, everySeconds: 5, grewOver10Percent: verdict.grew }
}

/** What the figures ran on: the commit (and whether the tree had changes), the machine and its load. */
function context (): Record<string, unknown> {
  const git = (...args: string[]): string => spawnSync('git', args, { cwd: ROOT, encoding: 'utf8' }).stdout?.trim() ?? ''
  return {
    commit: git('rev-parse', '--short', 'HEAD'),
    uncommittedChanges: git('status', '--porcelain', '--untracked-files=no') !== '',
    node: process.version,
    cpu: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    loadAverageAtStart: loadavg().map(n => Math.round(n * 100) / 100)
  }
}

function notes (options: Options, machine: Record<string, unknown>): string[] {
  const postgres = options.databaseUrl !== undefined
  return [
    `Note: the service ran as npm start does (node ${SERVICE_ARGUMENTS.join(' ')}), with LOG_LEVEL=${LOG_LEVEL} and RATE_LIMIT_PER_MINUTE=${RATE_LIMIT}, ` +
      (postgres ? `on PostgreSQL: a fresh schema per scenario and instance count, holding ${SEED_COUNT} seeded plants.` : 'on a fresh SQLite file.'),
    `Note: wrk -t1 -c${options.connections} --timeout ${WRK_TIMEOUT_SECONDS}s; ${options.rounds} rounds per scenario, the servers' turns rotated each round; ` +
      `${WARMUP_SECONDS} s warm-up then ${options.seconds} s measured per server and round; ` +
      (PINNED ? 'servers pinned to CPU 0, wrk to CPU 1.' : postgres ? 'nothing pinned (PostgreSQL shares the cores).' : 'one CPU: nothing pinned.'),
    postgres
      ? 'Note: the yardstick runs as plain JS compiled from scripts/yardsticks.ts (YARDSTICK=postgres) on the same schema as the service; with N instances, ' +
        'N processes of each are driven at once by N wrk processes with 1/N of the connections each: req/s summed, p50 weighted by requests, p99 the higher, RSS summed, peak RSS per process.'
      : `Note: the yardsticks run as plain JS compiled from scripts/yardsticks.ts; GET scenarios read ${SEED_COUNT} seeded plants ` +
        '(the service its own, over HTTP; the readers a file the bench wrote alike).',
    `Note: commit ${String(machine.commit)}${machine.uncommittedChanges === true ? ' with uncommitted changes' : ''}; ` +
      `load average at the start ${(machine.loadAverageAtStart as number[]).join(', ')}, at the end ${loadavg().map(n => n.toFixed(2)).join(', ')} ` +
      '(other work on the machine adds noise).'
  ]
}

function serviceProblems (): string[] {
  return started.filter(server => server.name === 'service').flatMap(service => {
    const { lines, first } = summarize(service.output)
    return lines === 0 ? [] : [`Service wrote ${lines} log line(s) at ${LOG_LEVEL} or above; the first:`, ...first]
  })
}

async function stop (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGCONT') // one paused between its turns (below) hears SIGTERM only once it runs again
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await exited
  clearTimeout(timer)
}

/** Stops the SSE readers first, and says what each received. */
async function stopFollowers (): Promise<string[]> {
  await Promise.all(followers.map(async follower => await stop(follower.child)))
  return followers.splice(0).map(follower => `Note: the ${follower.server.name === 'service-sse' ? 'SSE reader' : 'webhook receiver'} of the service on port ${follower.server.port} ${linesOf(follower.output).filter(line => !line.startsWith('port ')).join(' ') || 'printed nothing'}.`)
}

async function cleanUp (): Promise<void> {
  await Promise.all([...children].map(stop))
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true })
  for (const drop of schemaDrops.splice(0)) await drop()
}

/** The round's servers in turn: the list rotated by one each round. */
function turns<T> (servers: T[], round: number): T[] {
  const shift = (round - 1) % servers.length
  return [...servers.slice(shift), ...servers.slice(0, shift)]
}

function errorNotes (rows: Row[]): string[] {
  return rows.filter(r => r.errorDetail !== undefined).map(r =>
    `Errors: ${r.label}, round ${r.round}, ${nameOf(r.server)}: ${r.errorDetail ?? ''}`)
}

/** A scenario's rounds: in each, the contenders take turns in the rotated order. */
/**
 * A service with a webhook subscriber delivers in the background what it fell behind on during
 * its turn, and would take CPU 0 from the next contender: it is paused (SIGSTOP) outside its own
 * turns, so that all of its work, catching up included, falls within them.
 */
const pausedBetweenTurns = (contender: Contender): boolean => contender.name === 'service-hook' || contender.name === 'service-hook-down'

async function rounds (scenario: ScenarioName, instances: number, contenders: Contender[], lua: string, options: Options): Promise<Row[]> {
  const rows: Row[] = []
  const signal = (contender: Contender, name: NodeJS.Signals): void => {
    if (pausedBetweenTurns(contender)) for (const server of contender.servers) server.child.kill(name)
  }
  for (const contender of contenders) signal(contender, 'SIGSTOP')
  for (let round = 1; round <= options.rounds; round++) {
    for (const [turn, contender] of turns(contenders, round).entries()) {
      signal(contender, 'SIGCONT')
      rows.push(await measure(contender, scenario, instances, round, turn + 1, lua, options))
      signal(contender, 'SIGSTOP')
    }
  }
  for (const contender of contenders) signal(contender, 'SIGCONT')
  return rows
}

async function runSqlite (options: Options): Promise<{ rows: Row[], service: Server, dir: string, token: string }> {
  const dir = tempDir()
  const databaseUrl = join(dir, 'plantstore.db')
  const token = createToken(databaseUrl)
  const script = compiledYardsticks()
  const reads = options.only.some(s => s !== 'post')
  if (reads) seedFile(join(dir, 'seeded.db'))
  const yardsticks = new Map<YardstickName, Server>()
  for (const name of new Set(options.only.flatMap(s => SCENARIOS[s].yardsticks))) yardsticks.set(name, await startYardstick(name, script, token, dir))
  const service = await startService(databaseUrl)
  if (reads) await seed(service.port, token)
  // POST also with an SSE reader following the feed, and on the other build: each its own file.
  const others: Contender[] = []
  if (options.only.includes('post')) {
    const other = async (name: ServiceName): Promise<Contender> => {
      const own = join(dir, name)
      mkdirSync(own)
      const ownToken = createToken(join(own, 'plantstore.db'), name === 'base' ? BASE : ROOT)
      return { name, servers: [await startService(join(own, 'plantstore.db'), name, ownToken)], script: writeLua(own, 'post', ownToken) }
    }
    others.push(await other('service-sse'), await other('service-hook'), await other('service-hook-down'))
    if (BASE !== undefined) others.push(await other('base'))
  }
  const rows: Row[] = []
  for (const scenario of options.only) {
    const contenders = [...SCENARIOS[scenario].yardsticks.map(name => ({ name, servers: [yardsticks.get(name) as Server] })), { name: 'service' as const, servers: [service] },
      ...(scenario === 'post' ? others : [])]
    rows.push(...await rounds(scenario, 1, contenders, writeLua(dir, scenario, token), options))
  }
  return { rows, service, dir, token }
}

/** Drops of the schemas made, run at clean-up if a scenario did not drop its own. */
const schemaDrops: Array<() => Promise<void>> = []

/**
 * A new schema in the database of `url`, holding the service's tables (made by its own
 * migrations, through the CLI, which also makes the bench's token) and the seeded plants.
 * Returns the URL whose connections use it and the token.
 */
async function freshSchema (url: string, root = ROOT): Promise<{ schemaUrl: string, token: string, drop: () => Promise<void> }> {
  const schema = `bench_${Date.now().toString(36)}_${Math.floor(Math.random() * 1e6).toString(36)}`
  await queryOnce(url, `CREATE SCHEMA ${schema}`)
  let dropped = false
  const drop = async (): Promise<void> => {
    if (dropped) return
    dropped = true
    await queryOnce(url, `SET lock_timeout = '10s'; DROP SCHEMA ${schema} CASCADE`)
  }
  schemaDrops.push(drop)
  const schemaUrl = `${url}${url.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
  const token = createToken(schemaUrl, root)
  await queryOnce(url, `INSERT INTO ${schema}.plants (id, name, tag) SELECT i, 'Seed ' || i, 'seed' FROM generate_series(1, ${SEED_COUNT}) AS i; ANALYZE ${schema}.plants`)
  return { schemaUrl, token, drop }
}

/** Each instance count and scenario on a fresh schema: N service processes against N yardstick processes. */
async function runPostgres (options: Options & { databaseUrl: string }): Promise<Row[]> {
  const dir = tempDir()
  const script = compiledYardsticks()
  const rows: Row[] = []
  for (const instances of options.instances) {
    for (const scenario of options.only) {
      const { schemaUrl, token, drop } = await freshSchema(options.databaseUrl)
      // The other build (BENCH_BASE) on a schema its own migrations made.
      const base = BASE === undefined || scenario !== 'post' ? undefined : await freshSchema(options.databaseUrl, BASE)
      const servers: Server[] = []
      try {
        const many = async (start: () => Promise<Server>): Promise<Server[]> => {
          const list: Server[] = []
          for (let i = 0; i < instances; i++) list.push(await start())
          servers.push(...list)
          return list
        }
        const contenders: Contender[] = []
        for (const name of options.postgresYardsticks) contenders.push({ name, servers: await many(async () => await startYardstick(name, script, token, schemaUrl)) })
        contenders.push({ name: 'service', servers: await many(async () => await startService(schemaUrl)) })
        if (base !== undefined) {
          const own = join(dir, `base-${instances}`)
          mkdirSync(own, { recursive: true })
          contenders.push({ name: 'base', servers: await many(async () => await startService(base.schemaUrl, 'base')), script: writeLua(own, 'post', base.token) })
        }
        rows.push(...await rounds(scenario, instances, contenders, writeLua(dir, scenario, token), options))
      } finally {
        await Promise.all(servers.map(server => stop(server.child)))
        await drop()
        await base?.drop()
      }
    }
  }
  return rows
}

async function run (options: Options): Promise<{ errors: string[], [key: string]: unknown }> {
  let rows: Row[]
  let soaked: object | undefined
  if (options.databaseUrl !== undefined) {
    rows = await runPostgres({ ...options, databaseUrl: options.databaseUrl })
  } else {
    const sqlite = await runSqlite(options)
    rows = sqlite.rows
    const compared = comparisons(rows, options)
    printTables(rows, compared, serviceLimits(rows, options), options)
    const costs = webhookCosts(rows, options)
    console.log('\n' + markdown(['POST with webhooks', 'ratio to the service without, per round', 'median', 'target ≥ 0.9'],
      costs.map(c => [SERVICES[c.service], c.rounds.map(n => n.toFixed(3)).join(', '), `**${c.median.toFixed(3)}**`, met(c.met)])))
    soaked = options.soakSeconds > 0 ? await soak(sqlite.service, writeLua(sqlite.dir, 'post', sqlite.token), options.soakSeconds, options) : undefined
    return { rows, comparisons: compared, webhookCosts: webhookCosts(rows, options), service: serviceLimits(rows, options), targets: TARGETS, soak: soaked, errors: errorNotes(rows) }
  }
  const compared = comparisons(rows, options)
  const limits = serviceLimits(rows, options)
  printTables(rows, compared, limits, options)
  return { rows, comparisons: compared, service: limits, targets: TARGETS, errors: errorNotes(rows) }
}

async function main (): Promise<void> {
  const options = readOptions()
  checkTools()
  const machine = context()
  let interrupted = false
  process.once('SIGINT', () => {
    interrupted = true
    process.stderr.write('\nInterrupted: stopping the servers\n')
    cleanUp().finally(() => process.exit(130))
  })
  try {
    const results = await run(options)
    const extra = [...notes(options, machine), ...await stopFollowers(), ...results.errors, ...serviceProblems()]
    console.log('\n' + extra.join('\n'))
    const settings = { ...options, databaseUrl: options.databaseUrl === undefined ? undefined : 'set', warmupSeconds: WARMUP_SECONDS, threads: 1, pinned: PINNED, logLevel: LOG_LEVEL, rateLimitPerMinute: Number(RATE_LIMIT), seeded: SEED_COUNT }
    const ended = { loadAverageAtEnd: loadavg().map(n => Math.round(n * 100) / 100) }
    writeFileSync('bench-results.json', JSON.stringify({ date: new Date().toISOString(), ...machine, ...ended, settings, ...results, notes: extra }, null, 2) + '\n')
    console.log('Results written to bench-results.json')
  } catch (error) {
    if (interrupted) return
    process.exitCode = 1
    console.error(`bench failed: ${(error as Error).message}`)
    console.error(serviceProblems().join('\n'))
    for (const server of started) {
      if (server.exit !== undefined && server.exit !== 'code 0') console.error(`The ${server.name} server had exited (${server.exit}):\n${summarize(server.output).last.join('\n')}`)
    }
  } finally {
    await cleanUp()
    for (const service of started.filter(server => server.name === 'service')) {
      if (service.exit !== undefined && service.exit !== 'code 0') console.error(`The service stopped with ${service.exit}, not code 0.`)
    }
  }
}

await main()
