import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestContext } from 'node:test'

export const ROOT = new URL('..', import.meta.url).pathname
export const MAIN = join(ROOT, 'dist/cli/main.js')

/** A fresh directory, deleted after the test. */
export function tempDir (t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-test-'))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * Runs the plantstore CLI on the database in `dir` (`env` may set DATABASE_URL: undefined to
 * leave it out), in the directory `cwd` if given.
 */
export function cli (dir: string, args: string[], env: NodeJS.ProcessEnv = {}, cwd?: string): { status: number | null, stdout: string, stderr: string } {
  const result = spawnSync(process.execPath, [MAIN, ...args], {
    env: { ...process.env, DATABASE_URL: join(dir, 'plantstore.db'), ...env },
    encoding: 'utf8',
    cwd
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

export interface Server {
  url: string
  /** The token the first start printed (or the one passed in). */
  token: string
  dir: string
  dbPath: string
  process: ChildProcess
  stdout: () => string
  stderr: () => string
  /** Resolves with the exit code once the process has ended. */
  exited: Promise<number | null>
}

/**
 * Starts the built server as a child process on a free port, with its SQLite file in `dir`
 * (a fresh temp dir by default). On a fresh store it reads the token from the first-start
 * banner; on a reused one, pass `token`. `wrapper` runs it under another command (strace …).
 * Killed after the test.
 */
export async function startServer (t: TestContext, options: { dir?: string, token?: string, env?: NodeJS.ProcessEnv, wrapper?: string[], cwd?: string } = {}): Promise<Server> {
  const dir = options.dir ?? tempDir(t)
  const dbPath = join(dir, 'plantstore.db')
  const [command, ...args] = [...options.wrapper ?? [], process.execPath, MAIN, 'serve']
  const child = spawn(command, args, {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1', DATABASE_URL: dbPath, LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '0', ...options.env },
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
    const token = options.token ?? /^ {3}(pst_\S+)$/m.exec(err)?.[1]
    if (url !== undefined && token !== undefined) {
      return { url, token, dir, dbPath, process: child, stdout: () => out, stderr: () => err, exited }
    }
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`server did not start:\n${out}\n${err}`)
    await new Promise(resolve => setTimeout(resolve, 20))
  }
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
