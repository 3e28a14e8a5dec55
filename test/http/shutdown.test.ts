import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { Agent, request } from 'node:http'
import { existsSync, readdirSync, readlinkSync } from 'node:fs'
import { connect } from 'node:net'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, test } from 'node:test'
import pg from 'pg'
import { accepting, alive, call, cli, holdWriteLock, ROOT, startServer, tempDir, testStores } from '../helpers.js'
import { PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'
import { rawConnection, rawExchange } from '../raw.js'
import { storedPlants } from '../stored.js'

for (const store of testStores()) {
  describe(store, () => {
    test('SIGTERM stops the service within SHUTDOWN_TIMEOUT while a client holds a request open, and commits what it acknowledged', async (t) => {
      const server = await startServer(t, { store, env: { REQUEST_TIMEOUT: '60', SHUTDOWN_TIMEOUT: '2' } })
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Kept' } })).status, 200)
      const body = '{"id": 2, "name": "Never finished"}'
      // Headers and the start of a body, then nothing: only the shutdown deadline ends this request.
      const opened = Date.now()
      const stalled = rawExchange(server, `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 8)}`, { waitMs: 10_000 })
      await new Promise(resolve => setTimeout(resolve, 200))
      const signalled = Date.now()
      server.process.kill('SIGTERM')
      assert.equal(await server.exited, 0)
      const took = Date.now() - signalled
      assert.ok(took < 2500, `exited ${took} ms after SIGTERM`)
      assert.ok((await stalled).closed, 'the stalled connection was closed')
      const cutAt = opened + (await stalled).ms - signalled
      assert.ok(cutAt >= 950 && cutAt < 1800, `cut ${cutAt} ms after SIGTERM: a second before SHUTDOWN_TIMEOUT (2 s), as documented`)
      const lines = server.stdout().trim().split('\n').map(line => JSON.parse(line)).filter(line => line.msg === 'request' && line.method === 'POST')
      assert.deepEqual(lines.map(line => line.status), [200, 499], 'the request cut at the deadline has its log line too, as its client had left')
      const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
      assert.equal((await call(again, 'GET', '/plants/1')).body.name, 'Kept')
      assert.equal((await call(again, 'GET', '/plants/2')).status, 404)
    })

    test('SIGTERM during a request: it is answered, and the process exits as soon as it has been, not at the deadline', async (t) => {
      const server = await startServer(t, { store, env: { REQUEST_TIMEOUT: '60', SHUTDOWN_TIMEOUT: '10' } })
      const body = '{"id": 3, "name": "Finished late"}'
      const head = `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`
      // The body's first half, then SIGTERM, then the rest: a keep-alive connection with its answer sent.
      const answered = rawExchange(server, [head + body.slice(0, 10), body.slice(10)], { gapMs: 700, waitMs: 12_000 })
      await new Promise(resolve => setTimeout(resolve, 300))
      const signalled = Date.now()
      server.process.kill('SIGTERM')
      assert.equal(await server.exited, 0)
      const took = Date.now() - signalled
      assert.match((await answered).text, /^HTTP\/1\.1 200 /, 'the request in flight was answered')
      assert.ok(took < 3000, `exited ${took} ms after SIGTERM (SHUTDOWN_TIMEOUT 10 s)`)
      const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
      assert.equal((await call(again, 'GET', '/plants/3')).body.name, 'Finished late')
    })

    test('a second signal during the shutdown does not kill the server: it still commits and exits 0', async (t) => {
      const server = await startServer(t, { store, env: { REQUEST_TIMEOUT: '60', SHUTDOWN_TIMEOUT: '2' } })
      assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Kept' } })).status, 200)
      const stalled = rawExchange(server, `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n{"id"`, { waitMs: 10_000 })
      await new Promise(resolve => setTimeout(resolve, 200))
      server.process.kill('SIGTERM')
      await new Promise(resolve => setTimeout(resolve, 300))
      server.process.kill('SIGINT') // what Ctrl-C on `npm start` adds: npm passes it on as well
      server.process.kill('SIGTERM')
      assert.equal(await server.exited, 0)
      assert.equal(server.process.signalCode, null, 'not killed by a signal')
      await stalled
      const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
      assert.equal((await call(again, 'GET', '/plants/1')).body.name, 'Kept')
    })
  })
}

test('SIGTERM while another process holds the SQLite write lock: exit 0 within SHUTDOWN_TIMEOUT; the WAL it could not empty is read at the next start', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '2' } })
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Kept' } })).status, 200)
  const { released } = await holdWriteLock(t, server.dbPath, 4000)
  const signalled = Date.now()
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  const took = Date.now() - signalled
  assert.ok(took < 2000, `exited ${took} ms after SIGTERM (SHUTDOWN_TIMEOUT 2 s)`)
  await released
  const again = await startServer(t, { databaseUrl: server.databaseUrl, token: server.token })
  assert.equal((await call(again, 'GET', '/plants/1')).body.name, 'Kept')
})

test('SIGTERM while the server starts (its new store held by another process) ends it, exit 0, without its listening', { skip: process.platform !== 'linux' && 'reads /proc' }, async (t) => {
  const path = join(tempDir(t), 'plantstore.db')
  await holdWriteLock(t, path, 2500) // the start waits to switch the new file to WAL until the lock goes
  const child = spawn(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'serve', '--port', '0'], { env: { ...process.env, DATABASE_URL: path }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (alive(child.pid!)) child.kill('SIGKILL') })
  let stdout = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.resume()
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  // With the store's file open, it is starting: past installing its handlers, not yet listening.
  const opened = (): boolean => readdirSync(`/proc/${child.pid!}/fd`).some(fd => {
    try { return readlinkSync(`/proc/${child.pid!}/fd/${fd}`) === path } catch { return false }
  })
  for (const deadline = Date.now() + 10_000; !opened() && Date.now() < deadline;) await sleep(10)
  assert.doesNotMatch(stdout, /Server listening/, 'still starting')
  child.kill('SIGTERM')
  assert.equal(await exited, 0)
  assert.doesNotMatch(stdout, /Server listening/)
})

/** The answers in `bytes`, each its head's status and whether its body (Content-Length) came whole; and the bytes left over. */
function answersIn (bytes: Buffer): { answers: Array<{ status: string, whole: boolean }>, rest: number } {
  const answers = []
  let at = 0
  while (at < bytes.length) {
    const end = bytes.indexOf('\r\n\r\n', at)
    if (end === -1) break
    const head = bytes.subarray(at, end).toString('latin1')
    const length = Number(/\r\ncontent-length: (\d+)/i.exec(head)?.[1] ?? 0)
    answers.push({ status: head.slice(9, 12), whole: end + 4 + length <= bytes.length })
    at = Math.min(bytes.length, end + 4 + length)
  }
  return { answers, rest: bytes.length - at }
}

test('SIGTERM while answers are still being written to a client that reads slower than they are long: they go out whole, then the connection closes', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '5' } })
  const file = /docs\/(swagger-ui-bundle\.\w+\.js)/.exec((await call(server, 'GET', '/docs', { token: null })).text)?.[1]
  assert.ok(file !== undefined, 'the page names its script')
  const { hostname, port } = new URL(server.url)
  const socket = connect(Number(port), hostname)
  t.after(() => { socket.destroy() })
  await once(socket, 'connect')
  // Three answers of 1.7 MB each (no gzip asked for), pipelined, none read yet: more than the
  // kernel's buffers hold, so that the server is still writing one when it is stopped.
  socket.pause()
  socket.write(`GET /docs/${file} HTTP/1.1\r\nHost: x\r\n\r\n`.repeat(3))
  // Once the kernel's buffers are full, the server writes no more: the answer under way is stuck.
  const written = (): number => (server.stdout().match(/"route":"\/docs\/\{file\}"/g) ?? []).length
  for (let seen = -1, deadline = Date.now() + 10_000; written() === 0 || written() !== seen; await sleep(300)) {
    assert.ok(Date.now() < deadline, 'the answers written settle')
    seen = written()
  }
  server.process.kill('SIGTERM')
  await sleep(300) // the server closes, and looks for idle connections, while its answer is stuck
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.resume()
  await once(socket, 'close')
  const { answers, rest } = answersIn(Buffer.concat(chunks))
  assert.ok(answers.every(answer => answer.status === '200' && answer.whole) && rest === 0,
    `every answer is whole: ${JSON.stringify(answers)}, ${rest} bytes left over`)
  // The answer being written at the signal and the one next in line, at least (read before it).
  assert.ok(answers.length >= 2, `${answers.length} answers`)
  assert.equal(await server.exited, 0)
})

test('SIGTERM under load from keep-alive clients: each request they send is answered, or its new connection refused, never cut; every 200 is stored', { timeout: 60_000 }, async (t) => {
  const server = await startServer(t)
  const port = Number(new URL(server.url).port)
  // 64 clients, each sending its next POST as soon as it has its answer, on connections kept
  // alive: at any moment some are between an answer and their next request, which the signal may
  // find on its way.
  const agent = new Agent({ keepAlive: true, maxSockets: 64 })
  t.after(() => agent.destroy())
  const post = async (id: number): Promise<number | string> => await new Promise(resolve => {
    const body = JSON.stringify({ id, name: 'Under load' })
    const sent = request({ host: '127.0.0.1', port, method: 'POST', path: '/plants', agent, headers: { authorization: `Bearer ${server.token}`, 'content-type': 'application/json', 'content-length': body.length } }, answer => {
      answer.resume()
      answer.once('end', () => resolve(answer.statusCode ?? 0))
      answer.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message))
    })
    sent.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message))
    sent.end(body)
  })
  const stored: number[] = []
  const endings: Array<number | string> = []
  let next = 1
  const clients = Array.from({ length: 64 }, async () => {
    for (;;) {
      const id = next++
      const outcome = await post(id)
      if (outcome !== 200) return endings.push(outcome)
      stored.push(id)
    }
  })
  await sleep(1500)
  server.process.kill('SIGTERM')
  assert.equal(await server.exited, 0)
  await Promise.all(clients)
  assert.ok(stored.length > 100, `${stored.length} POSTs answered before the stop`)
  assert.deepEqual(endings.filter(ending => ending !== 'ECONNREFUSED'), [], 'each client ended on a refused connection, none on a cut one')
  const kept = new Set((await storedPlants(server)).map(plant => Number(plant.id)))
  assert.deepEqual(stored.filter(id => !kept.has(id)), [], 'every 200 is stored')
})

test('a failure answered while the server stops says Connection: close, as a success does then, not keep-alive', async (t) => {
  const server = await startServer(t, { env: { SHUTDOWN_TIMEOUT: '5' } })
  const { socket, received } = await rawConnection(t, server)
  const body = '{"id": 1, "name": "Fern"}'
  socket.write(`POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`)
  await sleep(200) // in flight, its body still arriving
  server.process.kill('SIGTERM')
  await sleep(200)
  socket.write(`${body.slice(5)}GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n`)
  await once(socket, 'close')
  const answers = received().split(/(?=HTTP\/1\.1 )/)
  assert.deepEqual(answers.map(answer => answer.slice(0, 12)), ['HTTP/1.1 200', 'HTTP/1.1 404'], received())
  assert.match(answers[1], /\r\nconnection: close\r\n/i)
  assert.doesNotMatch(answers[1], /keep-alive/i)
})

test('SIGTERM or SIGINT while the modules of the server load, before any of its handlers, ends the start with exit 0', async (t) => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    const dir = tempDir(t)
    const mark = join(dir, 'loading')
    const child = spawn(process.execPath, ['--import', join(ROOT, 'test/slow-server-load.mjs'), join(ROOT, 'dist/cli/main.js'), 'serve', '--port', '0'], { env: { ...process.env, DATABASE_URL: join(dir, 'plantstore.db'), SLOW_LOAD_MARK: mark }, stdio: ['ignore', 'ignore', 'pipe'] })
    t.after(() => { if (alive(child.pid!)) child.kill('SIGKILL') })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
    for (const deadline = Date.now() + 10_000; !existsSync(mark) && Date.now() < deadline;) await sleep(10)
    assert.ok(existsSync(mark), 'the modules of the server are loading')
    child.kill(signal)
    // At once on Node 20; Node 24 loads modules without turning its event loop meanwhile, and the
    // handler runs once the load is done. Either way not Node's death by the signal (143, 130).
    assert.equal(await exited, 0, `${signal}: ${stderr}`)
  }
})

test('postgres: SIGTERM while the first start waits to make its token stops the server, exit 0, and uses no token up', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url, schema } = await pgSchema(t)
  assert.equal(cli({ databaseUrl: url }, ['migrate']).status, 0)
  const holder = new pg.Client({ connectionString: PG_URL })
  await holder.connect()
  t.after(() => holder.end())
  await holder.query('BEGIN')
  await holder.query(`SELECT 1 FROM ${schema}.schema_lock WHERE name = 'first-token' FOR UPDATE`) // the first token waits for it
  const child = spawn(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'serve', '--port', '0'], { env: { ...process.env, DATABASE_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] })
  t.after(() => { if (alive(child.pid!)) child.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  for (const deadline = Date.now() + 10_000; !stdout.includes('Server listening') && Date.now() < deadline;) await sleep(10)
  child.kill('SIGTERM')
  assert.equal(await exited, 0, stderr)
  assert.doesNotMatch(stderr, /pst_/, 'no token shown')
  await holder.query('ROLLBACK')
  assert.equal(cli({ databaseUrl: url }, ['tokens', 'list']).stdout, '', 'none made: the next start shows its own')
})

// npm's part, whatever the store.
test('SIGTERM sent to `npm start` stops the server too, leaving no process behind', async (t) => {
  const dir = tempDir(t)
  const child = spawn('npm', ['start'], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', DATABASE_URL: join(dir, 'plantstore.db'), LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe']
  })
  const exited = new Promise<number | null>(resolve => child.once('exit', code => resolve(code)))
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  child.stderr.resume()
  let serverPid: number | undefined
  t.after(() => {
    if (serverPid !== undefined && alive(serverPid)) process.kill(serverPid, 'SIGKILL')
    if (child.exitCode === null) child.kill('SIGKILL')
  })
  const deadline = Date.now() + 20_000
  let port: number | undefined
  while (port === undefined) {
    const line = out.split('\n').find(text => text.includes('Server listening at'))
    if (line !== undefined) {
      const entry = JSON.parse(line)
      serverPid = entry.pid
      port = Number(/:(\d+)$/.exec(entry.msg)?.[1])
    }
    assert.ok(Date.now() < deadline && child.exitCode === null, `npm start did not start the server:\n${out}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
  assert.notEqual(serverPid, child.pid, 'the server is a process of its own, under npm')
  child.kill('SIGTERM')
  await exited
  for (let waited = 0; alive(serverPid!) && waited < 5000; waited += 50) await new Promise(resolve => setTimeout(resolve, 50))
  assert.equal(alive(serverPid!), false, 'the server process has exited')
  assert.equal(await accepting(port), false, 'nothing answers on its port')
})
