// Throughput, latency and memory of plantstore against scripts/reference-server.ts, which does
// the same request work without storage. Usage: npm run bench, with these optional settings:
//   BENCH_SECONDS (10)  BENCH_ROUNDS (5)  BENCH_CONNECTIONS (64)  BENCH_ONLY (post,get,list)  BENCH_SOAK_SECONDS (off)
// Each scenario runs in rounds, reference then service in each, so that both meet the same
// machine: on a shared VM throughput drifts from minute to minute (docs/performance.md). The ratio reported
// is the median of the rounds' ratios.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { availableParallelism, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

type ScenarioName = 'post' | 'get' | 'list'
type ServerName = 'reference' | 'service'

interface Options { seconds: number, rounds: number, connections: number, only: ScenarioName[], soakSeconds: number }

interface Server { name: ServerName, child: ChildProcess, pid: number, port: number, output: string[], exit?: string }

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
  round: number
  label: string
  server: ServerName
  requests: number
  requestsPerSecond: number
  p50Ms: number
  p99Ms: number
  rssStartMiB: number
  rssEndMiB: number
  peakRssMiB: number
  peakRssScope: 'scenario' | 'process lifetime'
  rssSeriesMiB: number[]
  /** Share of the server CPU's time the hypervisor gave to others meanwhile (steal): the noise floor of the round. */
  stealPercent: number
}

const ROOT = resolve(import.meta.dirname, '..')
const WARMUP_SECONDS = 3
const SEED_COUNT = 10_000
const LOG_LEVEL = 'warn'
const PINNED = availableParallelism() >= 2
const SCENARIOS: Record<ScenarioName, { label: string, method: string, path: string }> = {
  post: { label: 'POST /plants', method: 'POST', path: '/plants' },
  get: { label: 'GET /plants/{id}', method: 'GET', path: '/plants/{id}' },
  list: { label: 'GET /plants?limit=100', method: 'GET', path: '/plants?limit=100' }
}

const children = new Set<ChildProcess>()
const tempDirs: string[] = []
let runNumber = 0

function positive (name: string, fallback: number): number {
  const text = process.env[name] ?? String(fallback)
  if (!/^\d+$/.test(text) || Number(text) === 0) throw new Error(`${name} must be a positive whole number, not "${text}"`)
  return Number(text)
}

function readOptions (): Options {
  const only = (process.env.BENCH_ONLY ?? 'post,get,list').split(',').map(s => s.trim()).filter(Boolean)
  const unknown = only.find(s => !(s in SCENARIOS))
  if (unknown !== undefined || only.length === 0) throw new Error(`BENCH_ONLY takes a comma list of post, get, list, not "${process.env.BENCH_ONLY}"`)
  const soakSeconds = process.env.BENCH_SOAK_SECONDS === undefined ? 0 : positive('BENCH_SOAK_SECONDS', 0)
  return { seconds: positive('BENCH_SECONDS', 10), rounds: positive('BENCH_ROUNDS', 5), connections: positive('BENCH_CONNECTIONS', 64), only: only as ScenarioName[], soakSeconds }
}

function checkTools (): void {
  if (spawnSync('wrk', ['-v']).error !== undefined) throw new Error('wrk is not installed; install it with: apt-get install wrk')
  if (!existsSync(join(ROOT, 'dist/cli/main.js'))) throw new Error('dist/ is missing; run npm run build first')
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
    if (server.exit !== undefined) throw new Error(`${server.name} exited (${server.exit}) before answering /healthz:\n${linesOf(server.output).join('\n')}`)
    if (Date.now() > deadline) throw new Error(`${server.name} did not answer /healthz within 20 s`)
    await sleep(100)
  }
}

async function startServer (name: ServerName, args: string[], env: Record<string, string>): Promise<Server> {
  const port = await freePort()
  const [command, ...rest] = pinned(0, [process.execPath, ...args])
  // A clean environment: nothing of npm's or tsx's (NODE_OPTIONS) reaches the servers.
  const child = track(spawn(command, rest, { cwd: ROOT, env: { PATH: process.env.PATH ?? '', ...env, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] }))
  const server: Server = { name, child, pid: child.pid ?? 0, port, output: capture(child) }
  child.once('exit', (code, signal) => { server.exit = signal ?? `code ${code}` })
  await waitHealthy(server)
  return server
}

function createToken (databaseUrl: string): string {
  const run = spawnSync(process.execPath, ['dist/cli/main.js', 'tokens', 'create', '--name', 'bench'], { cwd: ROOT, env: { PATH: process.env.PATH ?? '', DATABASE_URL: databaseUrl }, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`tokens create failed: ${run.stderr}`)
  return run.stdout.trim()
}

/** Compiled to plain JS first: under tsx the reference would carry a loader thread and an esbuild process, and their memory. */
function compileReference (dir: string): string {
  const tsc = join(ROOT, 'node_modules/.bin/tsc')
  const args = ['--ignoreConfig', '--outDir', dir, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--strict', 'scripts/reference-server.ts']
  const run = spawnSync(tsc, args, { cwd: ROOT, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`compiling scripts/reference-server.ts failed:\n${run.stdout}${run.stderr}`)
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}\n')
  return join(dir, 'reference-server.js')
}

async function startReference (token: string): Promise<Server> {
  const script = compileReference(tempDir())
  const digest = createHash('sha256').update(token).digest('hex')
  return await startServer('reference', [script], { HOST: '127.0.0.1', REFERENCE_TOKEN_SHA256: digest })
}

/** The arguments after `node` in `npm start`: the bench runs the service as it ships, V8 flags included. */
function startArguments (): string[] {
  const start: string = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).scripts.start
  const [command, ...args] = start.split(/\s+/)
  if (command !== 'node') throw new Error(`npm start should run node, not "${start}"`)
  return args
}

const SERVICE_ARGUMENTS = startArguments()

async function startService (databaseUrl: string): Promise<Server> {
  const env = { HOST: '127.0.0.1', DATABASE_URL: databaseUrl, LOG_LEVEL, RATE_LIMIT_PER_MINUTE: '0' }
  return await startServer('service', SERVICE_ARGUMENTS, env)
}

async function postPlant (port: number, token: string, id: number): Promise<void> {
  const response = await fetch(`http://127.0.0.1:${port}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ id, name: `Seed ${id}`, tag: 'seed' })
  })
  const text = await response.text()
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
  const args = ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, `http://127.0.0.1:${port}`, '--', String(base)]
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

function perSecond (stats: WrkStats): number {
  return Math.round(stats.requests / (stats.durationUs / 1e6))
}

function check (stats: WrkStats, what: string): WrkStats {
  const socket = stats.connect + stats.read + stats.write + stats.timeout
  if (stats.non2xx > 0) throw new Error(`${what}: ${stats.non2xx} of ${stats.requests} responses were not 2xx; first: ${stats.sample ?? '?'}`)
  if (socket > 0) throw new Error(`${what}: socket errors: connect ${stats.connect}, read ${stats.read}, write ${stats.write}, timeout ${stats.timeout}`)
  if (stats.requests === 0) throw new Error(`${what}: no request completed`)
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

/** CPU `cpu`'s tick counters from /proc/stat: [total, steal]. */
function cpuTicks (cpu: number): [number, number] {
  const line = readFileSync('/proc/stat', 'utf8').split('\n').find(l => l.startsWith(`cpu${cpu} `))
  const fields = (line ?? '').trim().split(/\s+/).slice(1, 9).map(Number) // user nice system idle iowait irq softirq steal
  return [fields.reduce((sum, n) => sum + n, 0), fields[7] ?? Number.NaN]
}

/** Samples VmRSS now and every `everyMs`; the returned function stops and gives the series. */
function sampleRss (pid: number, everyMs: number): () => number[] {
  const series = [statusMiB(pid, 'VmRSS')]
  const timer = setInterval(() => series.push(statusMiB(pid, 'VmRSS')), everyMs)
  return () => {
    clearInterval(timer)
    return [...series, statusMiB(pid, 'VmRSS')]
  }
}

async function measure (server: Server, scenario: ScenarioName, round: number, script: string, options: Options): Promise<Row> {
  const what = `${SCENARIOS[scenario].label} on the ${server.name}, round ${round}`
  process.stderr.write(`${what}: ${WARMUP_SECONDS} s warm-up, ${options.seconds} s measured\n`)
  const scoped = resetPeak(server.pid)
  check(await wrk(server.port, script, WARMUP_SECONDS, options.connections), `${what} (warm-up)`)
  const stop = sampleRss(server.pid, 1000)
  const ticksBefore = cpuTicks(0)
  const stats = check(await wrk(server.port, script, options.seconds, options.connections), what)
  const series = stop()
  const ticksAfter = cpuTicks(0)
  const stealPercent = Math.round((ticksAfter[1] - ticksBefore[1]) / (ticksAfter[0] - ticksBefore[0]) * 1000) / 10
  return {
    scenario,
    round,
    label: SCENARIOS[scenario].label,
    server: server.name,
    requests: stats.requests,
    requestsPerSecond: perSecond(stats),
    p50Ms: stats.p50Us / 1000,
    p99Ms: stats.p99Us / 1000,
    rssStartMiB: series[0],
    rssEndMiB: series[series.length - 1],
    peakRssMiB: statusMiB(server.pid, 'VmHWM'),
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

/** The service's throughput over the reference's in one round of a scenario. */
function roundRatio (rows: Row[], scenario: ScenarioName, round: number): number | undefined {
  const of = (server: ServerName): number | undefined =>
    rows.find(r => r.scenario === scenario && r.server === server && r.round === round)?.requestsPerSecond
  const [service, reference] = [of('service'), of('reference')]
  return service === undefined || reference === undefined ? undefined : round3(service / reference)
}

/** Per scenario: each round's service/reference ratio, and their median. */
function ratios (rows: Row[]): Partial<Record<ScenarioName, { median: number, rounds: number[] }>> {
  const result: Partial<Record<ScenarioName, { median: number, rounds: number[] }>> = {}
  for (const scenario of new Set(rows.map(r => r.scenario))) {
    const rounds = [...new Set(rows.filter(r => r.scenario === scenario).map(r => r.round))]
      .map(round => roundRatio(rows, scenario, round))
      .filter((ratio): ratio is number => ratio !== undefined)
    if (rounds.length > 0) result[scenario] = { median: round3(median(rounds)), rounds }
  }
  return result
}

function printTable (rows: Row[], ratio: ReturnType<typeof ratios>): void {
  const header = ['scenario', 'server', 'round', 'req/s', 'p50 ms', 'p99 ms', 'RSS start→end MiB', 'peak RSS MiB', 'CPU 0 steal %', 'service/reference']
  const ratioOf = (r: Row): string => r.server === 'service' ? (roundRatio(rows, r.scenario, r.round)?.toFixed(3) ?? '') : ''
  const cells = rows.map(r => [r.label, r.server, String(r.round), String(r.requestsPerSecond), r.p50Ms.toFixed(2), r.p99Ms.toFixed(2),
    `${r.rssStartMiB.toFixed(1)} → ${r.rssEndMiB.toFixed(1)}`, r.peakRssMiB.toFixed(1), r.stealPercent.toFixed(1), ratioOf(r)])
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map(c => c[i].length)))
  const line = (c: string[]): string => c.map((text, i) => i < 2 ? text.padEnd(widths[i]) : text.padStart(widths[i])).join('  ')
  console.log([line(header), line(widths.map(w => '-'.repeat(w))), ...cells.map(line)].join('\n'))
  console.log('')
  for (const [scenario, { median, rounds }] of Object.entries(ratio)) {
    const service = rows.filter(r => r.scenario === scenario && r.server === 'service')
    console.log(`${SCENARIOS[scenario as ScenarioName].label}: service/reference ${median.toFixed(3)} (median of ${rounds.join(', ')}); ` +
      `service p99 ≤ ${Math.max(...service.map(r => r.p99Ms)).toFixed(2)} ms, peak RSS ${Math.max(...service.map(r => r.peakRssMiB)).toFixed(1)} MiB`)
  }
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
  const stop = sampleRss(service.pid, 5000)
  const stats = check(await wrk(service.port, script, seconds, options.connections), 'soak POST /plants on the service')
  const series = stop()
  const verdict = growthVerdict(series)
  console.log(`\nSoak (${seconds} s POST /plants, service, VmRSS every 5 s, MiB): ${series.join(', ')}`)
  console.log(`Soak: ${perSecond(stats)} req/s; ${verdict.text}`)
  return { seconds, requests: stats.requests, rssSeriesMiB: series, everySeconds: 5, grewOver10Percent: verdict.grew }
}

function notes (options: Options): string[] {
  return [
    `Note: the service ran as npm start does (node ${SERVICE_ARGUMENTS.join(' ')}), with LOG_LEVEL=${LOG_LEVEL} and RATE_LIMIT_PER_MINUTE=0, on a fresh SQLite file.`,
    `Note: wrk -t1 -c${options.connections}; ${options.rounds} rounds per scenario, reference then service in each; ` +
      `${WARMUP_SECONDS} s warm-up then ${options.seconds} s measured per server and round; ` +
      (PINNED ? 'servers pinned to CPU 0, wrk to CPU 1.' : 'one CPU: nothing pinned.'),
    `Note: the reference runs as plain JS compiled from scripts/reference-server.ts; GET scenarios read ${SEED_COUNT} seeded plants.`
  ]
}

function serviceProblems (service: Server | undefined): string[] {
  if (service === undefined) return []
  const lines = linesOf(service.output)
  return lines.length === 0 ? [] : [`Service wrote ${lines.length} log line(s) at ${LOG_LEVEL} or above; the first:`, ...lines.slice(0, 10)]
}

async function stop (child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise(resolve => child.once('exit', resolve))
  child.kill('SIGTERM')
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000)
  await exited
  clearTimeout(timer)
}

async function cleanUp (): Promise<void> {
  await Promise.all([...children].map(stop))
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true })
}

async function run (options: Options, servers: Partial<Record<ServerName, Server>>): Promise<object> {
  const dir = tempDir()
  const databaseUrl = join(dir, 'plantstore.db')
  const token = createToken(databaseUrl)
  const reference = servers.reference = await startReference(token)
  const service = servers.service = await startService(databaseUrl)
  if (options.only.some(s => s !== 'post')) await seed(service.port, token)
  const rows: Row[] = []
  for (const scenario of options.only) {
    const script = writeLua(dir, scenario, token)
    for (let round = 1; round <= options.rounds; round++) {
      for (const server of [reference, service]) rows.push(await measure(server, scenario, round, script, options))
    }
  }
  const ratio = ratios(rows)
  printTable(rows, ratio)
  const soaked = options.soakSeconds > 0 ? await soak(service, writeLua(dir, 'post', token), options.soakSeconds, options) : undefined
  return { rows, ratio, soak: soaked }
}

async function main (): Promise<void> {
  const options = readOptions()
  checkTools()
  const servers: Partial<Record<ServerName, Server>> = {}
  let interrupted = false
  process.once('SIGINT', () => {
    interrupted = true
    process.stderr.write('\nInterrupted: stopping the servers\n')
    cleanUp().finally(() => process.exit(130))
  })
  try {
    const results = await run(options, servers)
    const extra = [...notes(options), ...serviceProblems(servers.service)]
    console.log('\n' + extra.join('\n'))
    const settings = { ...options, warmupSeconds: WARMUP_SECONDS, threads: 1, pinned: PINNED, logLevel: LOG_LEVEL, seeded: SEED_COUNT }
    writeFileSync('bench-results.json', JSON.stringify({ date: new Date().toISOString(), node: process.version, settings, ...results, notes: extra }, null, 2) + '\n')
    console.log('Results written to bench-results.json')
  } catch (error) {
    if (interrupted) return
    process.exitCode = 1
    console.error(`bench failed: ${(error as Error).message}`)
    console.error(serviceProblems(servers.service).join('\n'))
  } finally {
    await cleanUp()
    if (servers.service?.exit !== undefined && servers.service.exit !== 'code 0') console.error(`The service stopped with ${servers.service.exit}, not code 0.`)
  }
}

await main()
