// Where a request's time goes, stage by stage. Starts the built service as `npm start` does, with
// V8's sampling CPU profiler, pinned to CPU 0; drives one scenario with wrk from CPU 1; then sorts
// every sample of the event loop's thread into a stage by the innermost frame on its stack that a
// stage's rule claims, and reports each stage per request. Samples are wall time on the thread, so
// "idle" is time the event loop waited, and a stage includes time the thread was preempted in it.
// Other threads (the SQLite writer, where there is one) are reported as their busy time per request.
// Usage: npm run build && node --import tsx scripts/profile-stages.ts [post|get|list] [SECONDS]
// With BENCH_DATABASE_URL=postgres://… the service runs on PostgreSQL, in a schema of its own
// made for the run (1000 plants seeded for the reads) and dropped after it. With BENCH_AS_USER=1
// the service runs as a user runs it: logging at info, the rate limit on (above the load). With
// PROFILE_KEEP=DIR the profiles are kept there (.cpuprofile: Chrome DevTools opens them). With
// PROFILE_SERVER=fastify the Fastify durable yardstick (scripts/yardstick-fastify.ts) is profiled
// instead of the service, POST on SQLite only: the two tables side by side show the service's own share.
import { spawn, spawnSync } from 'node:child_process'
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { compileYardsticks } from './compile-yardsticks.js'
import { queryOnce } from './postgres-query.js'
import { SQLITE_BINDING } from '../src/store/sqlite-driver.js'

interface CallFrame { functionName: string, url: string }
interface Profile { nodes: Array<{ id: number, callFrame: CallFrame, children?: number[] }>, startTime: number, samples: number[], timeDeltas: number[] }

const ROOT = resolve(import.meta.dirname, '..')

/** Stages in the order they are tried on each frame, innermost frame first: the first rule that claims a frame decides. */
const STAGES: Array<[string, (f: CallFrame) => boolean]> = [
  ['idle (event loop waiting)', f => f.functionName === '(idle)'],
  ['garbage collection', f => f.functionName === '(garbage collector)'],
  ['store: hand-over to the writer thread', f => f.functionName === 'postMessage'],
  ['store: pg driver (protocol, pool, rows)', f => /node_modules\/(pg|pg-[a-z]+|postgres-[a-z]+)\//.test(f.url)],
  ['store: queries, results, bookkeeping', f => /store\/(sqlite|postgres)[^/]*\.js|better-sqlite3/.test(f.url)],
  ['auth (token check)', f => /dist\/(auth|token-cache|tokens)\.js/.test(f.url)],
  ['route handler (the yardstick\'s)', f => /yardstick-fastify\.js/.test(f.url)],
  ['edge checks, rate limit', f => /dist\/(edge|rate-limit)\.js/.test(f.url)],
  ['metrics, CORS', f => /dist\/(metrics\/[a-z]+|cors)\.js/.test(f.url)],
  ['request log (pino)', f => /node_modules\/(pino|sonic-boom|fast-redact|quick-format-unescaped)\//.test(f.url)],
  ['body: JSON reading', f => /dist\/json\.js/.test(f.url)],
  ['body: receiving (stream, content-type parser)', f => /content-type-parser\.js|_http_incoming|streams\/readable|dist\/app\.js/.test(f.url)],
  ['validation (Ajv)', f => /ajv|validation\.js/.test(f.url) || (f.url === '' && /^validate/.test(f.functionName))],
  // fast-json-stringify's compiled serializers have no URL and are named anonymous0, anonymous1…
  ['serialization', f => /fast-json-stringify/.test(f.url) || (f.url === '' && /^anonymous\d*$/.test(f.functionName))],
  ['write-back (reply, headers, socket write)', f => /reply\.js|_http_outgoing|stream_base_commons|streams\/writable/.test(f.url) || f.functionName === 'writev' || f.functionName === 'writeUtf8String'],
  ['routing', f => /find-my-way|lib\/route\.js/.test(f.url)],
  ['Fastify core: request, hooks, handler', f => /fastify\/(fastify|lib\/[a-z-]+)\.js/.test(f.url) || /dist\/routes\//.test(f.url) || /crypto\/random/.test(f.url)],
  ['HTTP parse, connection', f => /_http_common|_http_server|node:net/.test(f.url) || /^parserOn/.test(f.functionName)],
  ['ticks, timers, promises, native', f => /task_queues|timers|promise/i.test(f.url) || ['(program)', 'processTicksAndRejections', 'runMicrotasks'].includes(f.functionName)]
]

const LUA: Record<string, string> = {
  post: `local threads = {}
function setup(thread) thread:set("tid", #threads); table.insert(threads, thread) end
function init(args) base = tid * 1000000000; counter = 0 end
wrk.headers["Content-Type"] = "application/json"
function request()
  counter = counter + 1
  return wrk.format("POST", "/plants", nil, '{"id":' .. string.format("%.0f", base + counter) .. ',"name":"Plant ' .. counter .. '","tag":"bench"}')
end`,
  get: 'function request() return wrk.format("GET", "/plants/" .. math.random(1, 1000)) end',
  list: 'function request() return wrk.format("GET", "/plants?limit=100") end'
}

/** Microseconds per stage for one thread's profile, counting only samples taken between `from` and `to` (µs, monotonic clock). */
function stagesOf (profile: Profile, from: number, to: number): Map<string, number> {
  const byId = new Map(profile.nodes.map(node => [node.id, node]))
  const parent = new Map<number, number>()
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node.id)
  const totals = new Map<string, number>()
  let at = profile.startTime
  profile.samples.forEach((sample, i) => {
    at += profile.timeDeltas[i] ?? 0
    if (at < from || at > to) return
    let stage = 'other'
    for (let id: number | undefined = sample; id !== undefined; id = parent.get(id)) {
      const claimed = STAGES.find(([, claims]) => claims(byId.get(id)!.callFrame))
      if (claimed !== undefined) { stage = claimed[0]; break }
    }
    totals.set(stage, (totals.get(stage) ?? 0) + (profile.timeDeltas[i] ?? 0))
  })
  return totals
}

/** Now on the clock V8's profiles use (CLOCK_MONOTONIC), in µs. */
function monotonicUs (): number {
  return Number(process.hrtime.bigint() / 1000n)
}

function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer().once('error', reject).listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number }
      probe.close(() => resolve(port))
    })
  })
}

function accepting (port: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = connect(port, '127.0.0.1').once('connect', () => { socket.destroy(); resolve(true) }).once('error', () => resolve(false))
  })
}

function pinned (cpu: number, command: string[]): string[] {
  return spawnSync('taskset', ['-c', String(cpu), 'true']).status === 0 ? ['taskset', '-c', String(cpu), ...command] : command
}

async function main (): Promise<void> {
  const scenario = process.argv[2] ?? 'post'
  const seconds = Number(process.argv[3] ?? 8)
  if (LUA[scenario] === undefined) throw new Error('scenario: post, get or list')
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-profile-'))
  const postgresUrl = process.env.BENCH_DATABASE_URL
  const schema = `profile_${process.pid}`
  if (postgresUrl !== undefined) await queryOnce(postgresUrl, `CREATE SCHEMA ${schema}`)
  try {
    const port = await freePort()
    const databaseUrl = postgresUrl === undefined
      ? join(dir, 'plantstore.db')
      : `${postgresUrl}${postgresUrl.includes('?') ? '&' : '?'}options=${encodeURIComponent(`-c search_path=${schema}`)}`
    const settings = process.env.BENCH_AS_USER === '1'
      ? { LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '100000000' }
      : { LOG_LEVEL: 'warn', RATE_LIMIT_PER_MINUTE: '0' }
    const env = { ...process.env, DATABASE_URL: databaseUrl, PORT: String(port), ...settings }
    const token = spawnSync(process.execPath, ['dist/cli/main.js', 'tokens', 'create', '--name', 'profile'], { cwd: ROOT, env, encoding: 'utf8' }).stdout.trim()
    if (postgresUrl !== undefined && scenario !== 'post') {
      await queryOnce(postgresUrl, `INSERT INTO ${schema}.plants (id, name, tag) SELECT i, 'Plant ' || i, 'bench' FROM generate_series(1, 1000) AS i`)
    } else if (scenario !== 'post') {
      const seed = spawnSync(process.execPath, ['-e', `const D=require(${JSON.stringify(SQLITE_BINDING)});const d=new D(${JSON.stringify(env.DATABASE_URL)});const s=d.prepare('INSERT INTO plants (id,name,tag) VALUES (?,?,?)');d.transaction(()=>{for(let i=1;i<=1000;i++)s.run(i,'Plant '+i,'bench')})();d.close()`], { cwd: ROOT })
      if (seed.status !== 0) throw new Error(String(seed.stderr))
    }
    const profiles = join(dir, 'profiles')
    const startFlags = /node (.*) dist\/cli\/main\.js/.exec(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start)?.[1].split(' ') ?? []
    // The Fastify durable yardstick instead (POST on SQLite only): what the service's own share is measured against.
    const yardstick = process.env.PROFILE_SERVER === 'fastify'
    if (yardstick && (scenario !== 'post' || postgresUrl !== undefined)) throw new Error('PROFILE_SERVER=fastify: POST on SQLite only')
    if (yardstick) compileYardsticks(ROOT, join(dir, 'yardsticks'))
    const program = yardstick ? [join(dir, 'yardsticks', 'yardstick-fastify.js')] : ['dist/cli/main.js', 'serve']
    const [command, ...args] = pinned(0, [process.execPath, ...startFlags, '--cpu-prof', `--cpu-prof-dir=${profiles}`, ...program])
    const server = spawn(command, args, { cwd: ROOT, env: { ...env, PLANTSTORE_ROOT: ROOT, DATABASE_PATH: databaseUrl, YARDSTICK_TOKEN: token }, stdio: 'ignore' })
    while (!await accepting(port)) await sleep(50)
    const url = `http://127.0.0.1:${port}`
    writeFileSync(join(dir, 'load.lua'), LUA[scenario])
    const from = monotonicUs()
    const wrk = spawnSync(pinned(1, ['wrk'])[0], [...pinned(1, ['wrk']).slice(1), '-t2', '-c64', `-d${seconds}s`, '-s', join(dir, 'load.lua'), '-H', `Authorization: Bearer ${token}`, url], { encoding: 'utf8' })
    const to = monotonicUs()
    const requests = Number(/(\d+) requests in/.exec(wrk.stdout)?.[1] ?? NaN)
    server.kill('SIGTERM')
    await new Promise(resolve => server.once('exit', resolve))
    const files = readdirSync(profiles).filter(file => file.endsWith('.cpuprofile')).sort()
    const [main, ...others] = files.map(file => JSON.parse(readFileSync(join(profiles, file), 'utf8')) as Profile)
    const stages = stagesOf(main, from, to)
    const total = [...stages.values()].reduce((sum, us) => sum + us, 0)
    console.log(`${scenario}: ${requests} requests in ${seconds} s (${Math.round(requests / seconds)} req/s); event loop thread, µs of wall time per request`)
    console.log('| stage | µs/request | share |\n|---|---|---|')
    for (const [stage, us] of [...stages].sort((a, b) => b[1] - a[1])) console.log(`| ${stage} | ${(us / requests).toFixed(2)} | ${(100 * us / total).toFixed(1)}% |`)
    for (const [i, profile] of others.entries()) {
      const busy = [...stagesOf(profile, from, to)].filter(([stage]) => !stage.startsWith('idle')).reduce((sum, [, us]) => sum + us, 0)
      console.log(`| other thread ${i + 1} (the SQLite writer, where there is one): busy | ${(busy / requests).toFixed(2)} | |`)
    }
  } finally {
    const keep = process.env.PROFILE_KEEP
    if (keep !== undefined) cpSync(join(dir, 'profiles'), keep, { recursive: true })
    rmSync(dir, { recursive: true, force: true })
    if (postgresUrl !== undefined) await queryOnce(postgresUrl, `DROP SCHEMA ${schema} CASCADE`)
  }
}

main().catch((error: unknown) => {
  console.error(error)
  process.exit(1)
})
