// `plantstore serve --workers N`: N server processes on one port (PostgreSQL), refused on SQLite.
import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { get } from 'node:http'
import { createServer } from 'node:net'
import { join } from 'node:path'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { accepting, alive, BANNER_TOKEN, freePort, call, cli, MAIN, parseMetrics, sampleValue, startServer, tempDir, type Server } from '../helpers.js'
import { rawExchange } from '../raw.js'
import { PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'

/** The processes whose parent is `pid`. */
function children (pid: number): number[] {
  const out = spawnSync('ps', ['--ppid', String(pid), '-o', 'pid='], { encoding: 'utf8' }).stdout
  return out.split('\n').filter(line => line.trim() !== '').map(Number)
}

/** A GET on a connection of its own, closed after the answer (no keep-alive): its status. */
function getOnNewConnection (server: Server, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    get(server.url + path, { agent: false, headers: { authorization: `Bearer ${server.token}` } }, (res) => {
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    }).on('error', reject)
  })
}

/** GET /metrics on a connection of its own: node:cluster hands each new connection to the next worker. */
function metricsOnNewConnection (server: Server): Promise<string> {
  return new Promise((resolve, reject) => {
    get(server.url + '/metrics', { agent: false }, (res) => {
      let text = ''
      res.setEncoding('utf8').on('data', chunk => { text += chunk }).on('end', () => res.statusCode === 200 ? resolve(text) : reject(new Error(`${res.statusCode}: ${text}`)))
    }).on('error', reject)
  })
}

/** The pids in the request log lines written so far, each with how many requests it answered. */
function servedBy (server: Server): Map<number, number> {
  const counts = new Map<number, number>()
  for (const line of server.stdout().split('\n')) {
    if (!line.includes('"msg":"request"')) continue
    const { pid } = JSON.parse(line) as { pid: number }
    counts.set(pid, (counts.get(pid) ?? 0) + 1)
  }
  return counts
}

/** Polls `check` every 50 ms until it holds, for at most `ms`. */
async function until (ms: number, what: string, check: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await check())) {
    assert.ok(Date.now() < deadline, `not within ${ms} ms: ${what}`)
    await sleep(50)
  }
}

const listening = (server: Server): number => server.stdout().split('\n').filter(line => line.includes('Server listening at')).length

test('--workers above 1 on SQLite is refused in one line saying why, exit 1, nothing listening and no store created', async (t) => {
  const dir = tempDir(t)
  const port = await freePort()
  for (const [args, env] of [[['serve', '--workers', '2'], {}], [['serve'], { WORKERS: '3' }]] as const) {
    const result = cli(dir, [...args], { PORT: String(port), ...env })
    assert.equal(result.status, 1, result.stderr)
    assert.equal(result.stdout, '')
    assert.match(result.stderr, /^plantstore: WORKERS is \d, but a SQLite store has one writer: run one process \(WORKERS=1\), or use PostgreSQL \(a postgres:\/\/ DATABASE_URL\) for several\.\n$/)
  }
  assert.equal(existsSync(join(dir, 'plantstore.db')), false, 'nothing created')
  const bad = cli(dir, ['serve', '--workers', '65'], { PORT: String(port), DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' })
  assert.equal(bad.status, 1)
  assert.equal(bad.stderr, 'plantstore: WORKERS must be a whole number from 1 to 64, not "65".\n') // more values: test/unit/config.test.ts
  // The primary opens the database before any worker: an unreachable one is one line too.
  const unreachable = cli(dir, ['serve', '--workers', '2'], { PORT: String(port), DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none' })
  assert.equal(unreachable.status, 1)
  assert.match(unreachable.stderr, /^plantstore: Cannot open the PostgreSQL database in DATABASE_URL: ECONNREFUSED[^\n]*\n$/)
})

test('--workers 1 is the single process of today: it serves, with no child process', async (t) => {
  const server = await startServer(t, { env: { WORKERS: '1' } })
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
  assert.deepEqual(children(server.process.pid!), [])
})

if (PG_URL === undefined) {
  test('--workers on PostgreSQL', { skip: PG_SKIP }, () => {})
} else {
  test('--workers 2 on PostgreSQL: two processes answer on one port, one banner; a killed worker is replaced; SIGTERM stops them all, exit 0', async (t) => {
    const { url } = await pgSchema(t)
    const server = await startServer(t, { env: { DATABASE_URL: url, WORKERS: '2', SHUTDOWN_TIMEOUT: '3' } })
    const primary = server.process.pid!
    t.after(() => { for (const pid of children(primary)) process.kill(pid, 'SIGKILL') })
    await until(20_000, 'both workers listen', () => listening(server) === 2)
    const workers = children(primary)
    assert.equal(workers.length, 2, `children of the primary: ${workers.join(' ')}`)

    const statuses = await Promise.all(Array.from({ length: 40 }, () => getOnNewConnection(server, '/plants')))
    assert.deepEqual(new Set(statuses), new Set([200]))
    await until(2000, 'the request lines are written', () => [...servedBy(server).values()].reduce((a, b) => a + b, 0) >= 40)
    assert.deepEqual([...servedBy(server).keys()].sort(), [...workers].sort(), 'each worker answered some of the requests')
    assert.equal([...server.stderr().matchAll(new RegExp(BANNER_TOKEN, 'gm'))].length, 1, server.stderr())
    for (const line of server.stdout().split('\n').filter(text => text !== '')) assert.doesNotThrow(() => JSON.parse(line), line)

    for (const id of [1, 2, 3]) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `Plant ${id}` } })).status, 200)

    // Whichever worker takes a scrape, it answers for both: the 40 requests, every time; what each
    // reads from the store they share (the log's head) is one reading, not the workers' sum.
    for (let scrape = 0; scrape < 6; scrape++) {
      const samples = parseMetrics(await metricsOnNewConnection(server))
      assert.equal(sampleValue(samples, 'plantstore_changes_position', { end: 'head' }), 3, `scrape ${scrape}`)
      assert.equal(sampleValue(samples, 'plantstore_webhooks_disabled'), 0, `scrape ${scrape}`)
      assert.equal(sampleValue(samples, 'plantstore_http_requests_total', { method: 'GET', route: '/plants', status: '200' }), 40, `scrape ${scrape}`)
      assert.equal(sampleValue(samples, 'plantstore_http_request_duration_seconds_bucket', { method: 'GET', route: '/plants', status: '200', le: '+Inf' }), 40, `scrape ${scrape}`)
    }

    // A worker killed outright: the other answers meanwhile, and a new one takes its place.
    process.kill(workers[0], 'SIGKILL')
    await until(5000, 'the primary notices', () => /worker exited unexpectedly/.test(server.stdout()))
    for (let i = 0; i < 10; i++) assert.equal(await getOnNewConnection(server, '/plants'), 200)
    // Scrapes while the replacement starts: summed from the workers that can answer, at once.
    let scrapes = 0
    while (listening(server) < 3) {
      const started = Date.now()
      const samples = parseMetrics(await metricsOnNewConnection(server))
      assert.ok(Date.now() - started < 2000, `a scrape took ${Date.now() - started} ms while a worker started`)
      assert.ok((sampleValue(samples, 'plantstore_http_requests_total', { method: 'GET', route: '/plants', status: '200' }) ?? 0) >= 10)
      scrapes++
    }
    assert.ok(scrapes > 0, 'scraped while the new worker started')
    await until(20_000, 'a new worker listens', () => listening(server) === 3)
    const replaced = children(primary)
    assert.equal(replaced.length, 2)
    assert.ok(replaced.includes(workers[1]) && !replaced.includes(workers[0]), `${workers.join(' ')} then ${replaced.join(' ')}`)
    const statusesAfter = await Promise.all(Array.from({ length: 20 }, () => getOnNewConnection(server, '/plants')))
    assert.deepEqual(new Set(statusesAfter), new Set([200]))
    const restarts = server.stdout().split('\n').filter(line => line.includes('worker exited unexpectedly'))
    assert.equal(restarts.length, 1, 'one line per death')
    const restart = JSON.parse(restarts[0])
    assert.deepEqual([restart.level, restart.workerPid, restart.code, restart.signal], [40, workers[0], null, 'SIGKILL'])

    const { port } = new URL(server.url)
    const stalled = rawExchange(server, `GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Length: 10\r\n\r\n{`, { waitMs: 10_000 })
    await sleep(200)
    const signalled = Date.now()
    server.process.kill('SIGTERM')
    assert.equal(await server.exited, 0, server.stdout())
    assert.ok(Date.now() - signalled < 3500, `exited ${Date.now() - signalled} ms after SIGTERM, SHUTDOWN_TIMEOUT 3 s`)
    assert.ok((await stalled).closed, 'the stalled request was cut at the deadline')
    assert.deepEqual(replaced.filter(alive), [], 'no worker left')
    assert.equal(await accepting(Number(port)), false, 'the port is closed')
  })

  test('--workers 3: with no requests between scrapes, every series of the summed metrics stays exactly the same, floating-point sums too (Prometheus reads any fall as a reset)', async (t) => {
    const { url } = await pgSchema(t)
    const server = await startServer(t, { env: { DATABASE_URL: url, WORKERS: '3' } })
    t.after(() => { for (const pid of children(server.process.pid!)) process.kill(pid, 'SIGKILL') })
    await until(20_000, 'the workers listen', () => listening(server) === 3)
    for (const path of ['/plants', '/plants/1', '/plants?limit=5', '/plants?limit=0', '/plants/x', '/plants/changes', '/nowhere', '/healthz']) await Promise.all(Array.from({ length: 30 }, () => getOnNewConnection(server, path)))
    await until(2000, 'every worker answered some', () => servedBy(server).size === 3)
    const sums = async (): Promise<Map<string, number>> => new Map(parseMetrics(await metricsOnNewConnection(server))
      .filter(sample => sample.name === 'plantstore_http_request_duration_seconds_sum' ||
        (sample.name === 'plantstore_store_operation_duration_seconds_sum' && ['get', 'list', 'changes', 'findToken'].includes(sample.labels.operation)))
      .map(sample => [`${sample.name} ${JSON.stringify(sample.labels)}`, sample.value]))
    const first = await sums()
    assert.ok(first.size >= 10, `series: ${[...first.keys()].join(' ')}`)
    for (let scrape = 1; scrape < 30; scrape++) assert.deepEqual(await sums(), first, `scrape ${scrape}`)
  })

  test('a worker that keeps dying is restarted after growing waits, not in a tight loop', async (t) => {
    const { url } = await pgSchema(t)
    const server = await startServer(t, { env: { DATABASE_URL: url, WORKERS: '2' } })
    const primary = server.process.pid!
    t.after(() => { for (const pid of children(primary)) process.kill(pid, 'SIGKILL') })
    await until(20_000, 'both workers listen', () => listening(server) === 2)
    const waits = (): number[] => server.stdout().split('\n').filter(line => line.includes('worker exited unexpectedly')).map(line => JSON.parse(line).restartInMs)
    for (let death = 1; death <= 3; death++) {
      // The newest worker each time, within seconds of its start: a crash loop.
      const newest = Math.max(...children(primary))
      const killedAt = Date.now()
      process.kill(newest, 'SIGKILL')
      await until(5000, 'the primary notices', () => waits().length === death)
      await until(20_000, 'a new worker runs', () => children(primary).length === 2 && !children(primary).includes(newest))
      // The wait is kept, not only logged: the new process appears no sooner (polled every 50 ms).
      assert.ok(Date.now() - killedAt >= waits()[death - 1], `death ${death}: replaced ${Date.now() - killedAt} ms after, the wait ${waits()[death - 1]} ms`)
    }
    const [first, second, third] = waits()
    assert.ok(second === first * 2 && third === second * 2, `waits ${waits().join(', ')} ms`)
    assert.equal((await call(server, 'GET', '/plants')).status, 200)
  })

  test('--workers N with its port taken fails in one line, from the first worker only, exit 1', async (t) => {
    const { url } = await pgSchema(t)
    const taken = createServer()
    await new Promise<void>(resolve => taken.listen(0, '127.0.0.1', resolve))
    t.after(() => taken.close())
    const { port } = taken.address() as { port: number }
    const child = spawn(process.execPath, [MAIN, 'serve', '--workers', '3'], { env: { ...process.env, DATABASE_URL: url, PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    child.stdout.resume()
    const code = await new Promise(resolve => child.once('exit', resolve))
    assert.equal(code, 1)
    assert.equal(stderr, `plantstore: Cannot listen on 127.0.0.1:${port}: the port is already in use; stop what uses it or choose another PORT.\n`)
  })
}
