import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { isPostgresUrl } from '../src/config.js'
import { SQLITE_BINDING } from '../src/store/sqlite-driver.js'
import { PG_SKIP, PG_URL, pgSchema } from './store/postgres-helpers.js'

export const ROOT = new URL('..', import.meta.url).pathname
export const MAIN = join(ROOT, 'dist/cli/main.js')

/** A fresh directory, deleted after the test. */
export function tempDir (t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-test-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** The token line of the first-start banner on stderr; its group is the token. */
export const BANNER_TOKEN = /^ {3}(pst_\S+)$/m

/** A loopback port nothing listens on now. */
export async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number }
      server.close(() => resolve(port))
    })
  })
}

/** True while something accepts connections on the port. */
export function accepting (port: number): Promise<boolean> {
  return new Promise(resolve => {
    const socket = connect(port, '127.0.0.1')
    socket.on('connect', () => { socket.destroy(); resolve(true) })
    socket.on('error', () => resolve(false))
  })
}

export type StoreKind = 'sqlite' | 'postgres'

/** A database of its own for a test: where DATABASE_URL points, and which store that is. */
export interface TestDatabase { store: StoreKind, databaseUrl: string }

let postgresSkipSaid = false

/**
 * The stores a black-box suite runs on: SQLite always, PostgreSQL when TEST_DATABASE_URL names a
 * server. Without it, the file says once, in a skipped test, why its PostgreSQL half does not run.
 */
export function testStores (): StoreKind[] {
  if (PG_URL !== undefined) return ['sqlite', 'postgres']
  if (!postgresSkipSaid) {
    postgresSkipSaid = true
    test('the same tests on PostgreSQL', { skip: PG_SKIP }, () => {})
  }
  return ['sqlite']
}

/** A new, empty database of the kind asked for, gone after the test: a file in a temp dir, or a schema of its own. */
export async function freshDatabase (t: TestContext, store: StoreKind): Promise<TestDatabase> {
  return { store, databaseUrl: store === 'postgres' ? (await pgSchema(t)).url : join(tempDir(t), 'plantstore.db') }
}

/**
 * Runs the plantstore CLI on `database`, or on the SQLite file in the directory `database`
 * (`env` may set DATABASE_URL: undefined to leave it out), in the directory `cwd` if given.
 */
export function cli (database: string | Pick<TestDatabase, 'databaseUrl'>, args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string): { status: number | null, stdout: string, stderr: string } {
  const databaseUrl = typeof database === 'string' ? join(database, 'plantstore.db') : database.databaseUrl
  const result = spawnSync(process.execPath, [MAIN, ...args], {
    env: { ...process.env, DATABASE_URL: databaseUrl, ...env },
    encoding: 'utf8',
    cwd
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

/** The CLI, as `cli` runs it but without blocking this process: servers and lock holders go on meanwhile. */
export async function cliAsync (args: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null, stderr: string }> {
  const child = spawn(process.execPath, [MAIN, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  child.stdout.resume()
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  return await new Promise(resolve => child.once('exit', status => resolve({ status, stderr })))
}

export interface Server extends TestDatabase {
  url: string
  /** The token the first start printed (or the one passed in). */
  token: string
  dir: string
  /** The SQLite file in `dir`; on PostgreSQL nothing is there. */
  dbPath: string
  process: ChildProcess
  stdout: () => string
  stderr: () => string
  /** Resolves with the exit code once the process has ended. */
  exited: Promise<number | null>
}

/**
 * Starts the built server as a child process on a free port, on `databaseUrl` (or
 * env.DATABASE_URL) if given, else on a new database of the kind `store` names: by default a
 * SQLite file in `dir` (a fresh temp dir by default). On a fresh store it reads the token from
 * the first-start banner; on a reused one, pass `token`. `wrapper` runs it under another
 * command (strace …). Killed after the test.
 */
export async function startServer (t: TestContext, options: { store?: StoreKind, databaseUrl?: string, dir?: string, token?: string, env?: NodeJS.ProcessEnv, wrapper?: string[], cwd?: string } = {}): Promise<Server> {
  const dir = options.dir ?? tempDir(t)
  const dbPath = join(dir, 'plantstore.db')
  const databaseUrl = options.databaseUrl ?? options.env?.DATABASE_URL ?? (options.store === 'postgres' ? (await pgSchema(t)).url : dbPath)
  const store: StoreKind = isPostgresUrl(databaseUrl) ? 'postgres' : 'sqlite'
  const [command, ...args] = [...options.wrapper ?? [], process.execPath, MAIN, 'serve']
  const child = spawn(command, args, {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '0', ...options.env, DATABASE_URL: databaseUrl },
    stdio: ['ignore', 'pipe', 'pipe'],
    cwd: options.cwd
  })
  let out = ''
  let err = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { err += chunk })
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  const deadline = Date.now() + 15_000
  for (;;) {
    // The log says where it listens; below LOG_LEVEL=info only the first start's banner does.
    const url = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1] ?? /curl -X POST (http:\/\/127\.0\.0\.1:\d+)\/plants/.exec(err)?.[1]
    const token = options.token ?? BANNER_TOKEN.exec(err)?.[1]
    if (url !== undefined && token !== undefined) {
      return { store, databaseUrl, url, token, dir, dbPath, process: child, stdout: () => out, stderr: () => err, exited }
    }
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`server did not start:\n${out}\n${err}`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
}

/** A change of the log as tests read it: position and id kept exact, as strings. */
export interface ExactChange { position: string, type: string, id: string, plant: { name: string, tag?: string }, at: string }

/** JSON whose `position` and `id` numbers are kept exact, as strings: they can pass 2^53. */
export function parseExact<T = ExactChange[]> (text: string): T {
  return JSON.parse(text.replace(/"(position|id)":(-?\d+)/g, '"$1":"$2"'))
}

export interface Answer { status: number, headers: Headers, text: string, body: any }

/** One HTTP request with the server's token (unless `token` is given, or null for none). */
export async function call (server: Server, method: string, path: string, options: { body?: unknown, raw?: string, token?: string | null, headers?: Record<string, string> } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers }
  const token = options.token === undefined ? server.token : options.token
  if (token !== null) headers.authorization = `Bearer ${token}`
  let body: string | undefined = options.raw
  if (options.body !== undefined) body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body)
  if (body !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json'
  const res = await fetch(server.url + path, { method, headers, body })
  const text = await res.text()
  let parsed: unknown
  try { parsed = JSON.parse(text) } catch { parsed = undefined }
  return { status: res.status, headers: res.headers, text, body: parsed }
}

/** Asserts the Error body: exactly `error` (= status) and a non-empty `message`, as JSON. */
export function isErrorBody (answer: Answer, status: number): boolean {
  const keys = answer.body === undefined ? [] : Object.keys(answer.body).sort()
  return answer.status === status &&
    (answer.headers.get('content-type') ?? '').startsWith('application/json') &&
    keys.join() === 'error,message' && answer.body.error === status &&
    typeof answer.body.message === 'string' && answer.body.message.length > 0
}

export interface Sample { name: string, labels: Record<string, string>, value: number }

/** The samples of a Prometheus text exposition, comments left out. */
export function parseMetrics (text: string): Sample[] {
  return text.split('\n').filter(line => line !== '' && !line.startsWith('#')).map(line => {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (match === null) throw new Error(`not a sample line: ${line}`)
    const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map(([, key, value]) => [key, value]))
    return { name: match[1], labels, value: Number(match[3]) }
  })
}

/** The value of the one sample named `name` whose labels include `labels`; undefined if none. */
export function sampleValue (samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter(s => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value))
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`)
  return found[0]?.value
}

/**
 * Another process holding the SQLite write lock of `dbPath` for `ms` (an operator's open
 * transaction): resolves once it holds it; writes then wait until their 2 s deadline and are
 * answered 503. Ended after the test.
 */
export async function holdWriteLock (t: TestContext, dbPath: string, ms: number): Promise<{ released: Promise<void> }> {
  const locker = spawn(process.execPath, ['-e', `
    const db = require(${JSON.stringify(SQLITE_BINDING)})(process.argv[1])
    db.exec('BEGIN IMMEDIATE')
    console.log('locked')
    setTimeout(() => { db.exec('ROLLBACK'); db.close() }, ${ms})
  `, dbPath], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] })
  const released = new Promise<void>(resolve => locker.once('exit', () => resolve()))
  t.after(() => { locker.kill(); return released })
  await new Promise<void>((resolve, reject) => {
    locker.stdout.setEncoding('utf8').on('data', (text: string) => { if (text.includes('locked')) resolve() })
    locker.once('exit', () => reject(new Error('the lock holder exited before it held the lock')))
  })
  return { released }
}

/** Whether a process with this pid is still running. */
export function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Two servers on one new PostgreSQL schema, each its own process; the first prints the token both use. */
export async function twoInstances (t: TestContext, env: NodeJS.ProcessEnv = {}): Promise<{ servers: Server[], url: string, schema: string }> {
  const { url, schema } = await pgSchema(t)
  const first = await startServer(t, { env: { DATABASE_URL: url, ...env } })
  const second = await startServer(t, { env: { DATABASE_URL: url, ...env }, token: first.token })
  return { servers: [first, second], url, schema }
}
