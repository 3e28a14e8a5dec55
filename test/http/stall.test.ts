import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { call, holdWriteLock, startServer, type Server } from '../helpers.js'

const LOCK_MS = 8000
const POSTS_PER_SECOND = 400
/** How long the load goes on after the release: writes must succeed again within this. */
const AFTER_RELEASE_MS = 3000

interface Sent { id: number, sentAt: number, answeredAt: number, status: number, retryAfter?: string, body: string }

/** One POST /plants over `agent`; a failed connection is status 0. */
function post (server: Server, agent: http.Agent, id: number): Promise<Sent> {
  const sentAt = Date.now()
  const body = JSON.stringify({ id, name: `Plant ${id}` })
  return new Promise(resolve => {
    const done = (status: number, text: string, retryAfter?: string): void => resolve({ id, sentAt, answeredAt: Date.now(), status, retryAfter, body: text })
    const request = http.request(`${server.url}/plants`, {
      method: 'POST',
      agent,
      headers: { authorization: `Bearer ${server.token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }
    }, response => {
      let text = ''
      response.setEncoding('utf8').on('data', (chunk: string) => { text += chunk })
      response.on('end', () => done(response.statusCode ?? 0, text, response.headers['retry-after']))
      response.on('error', () => done(0, text))
    })
    request.on('error', error => done(0, error.message))
    request.end(body)
  })
}

/** The resident memory high-water mark of process `pid`, in MiB. */
function peakMiB (pid: number): number {
  const kib = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
  return Number(kib) / 1024
}

/** Every plant id the server holds, page by page. */
async function storedIds (server: Server): Promise<Set<number>> {
  const ids = new Set<number>()
  let after = ''
  for (;;) {
    const page = await call(server, 'GET', `/plants?limit=1000${after}`)
    assert.equal(page.status, 200)
    for (const plant of page.body as Array<{ id: number }>) ids.add(plant.id)
    if (page.body.length < 1000) return ids
    after = `&after=${String(page.body.at(-1).id)}`
  }
}

function percentile (sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * p) - 1)]
}

test(`while another process holds the SQLite write lock for ${LOCK_MS / 1000} s, ${POSTS_PER_SECOND} POSTs/s answer 200 or 503 within 3 s, reads keep answering, memory stays bounded, and every 200 is stored`, { skip: process.platform === 'linux' ? false : 'reads /proc', timeout: 40_000 }, async (t) => {
  const server = await startServer(t)
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'stored before the lock' } })).status, 200)
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity })
  t.after(() => agent.destroy())

  // Another process: an operator's sqlite3 session that took the write lock and sits on it.
  const { released } = await holdWriteLock(t, server.dbPath, LOCK_MS)
  const lockedAt = Date.now()
  let releasedAt = Infinity
  released.then(() => { releasedAt = Date.now() }, () => {}) // the holder exits as it lets go

  // Open loop: the POSTs leave on schedule, whether or not the earlier ones were answered.
  const posts: Array<Promise<Sent>> = []
  const reads: Array<Promise<{ status: number, ms: number }>> = []
  const loadEnds = (): number => Math.min(releasedAt, lockedAt + LOCK_MS + 2000) + AFTER_RELEASE_MS
  let nextId = 1000
  while (Date.now() < loadEnds()) {
    const due = Math.floor((Date.now() - lockedAt) * POSTS_PER_SECOND / 1000)
    while (posts.length < due) posts.push(post(server, agent, nextId++))
    if (Date.now() < releasedAt && reads.length < (Date.now() - lockedAt) / 100) {
      const start = Date.now()
      reads.push(call(server, 'GET', '/plants/1').then(answer => ({ status: answer.status, ms: Date.now() - start })))
    }
    await sleep(5)
  }
  const sent = await Promise.all(posts)
  const read = await Promise.all(reads)
  assert.ok(Number.isFinite(releasedAt), 'the lock was released during the run')

  const statuses = new Map<number, number>()
  for (const { status } of sent) statuses.set(status, (statuses.get(status) ?? 0) + 1)
  t.diagnostic(`${sent.length} POSTs: ${JSON.stringify(Object.fromEntries(statuses))}; ${read.length} reads during the lock`)
  assert.deepEqual([...statuses.keys()].filter(status => status !== 200 && status !== 503), [], 'only 200 and 503')
  assert.ok((statuses.get(503) ?? 0) > 0, 'the lock did stop writes')
  for (const answer of sent.filter(({ status }) => status === 503)) {
    assert.equal(answer.retryAfter, '1')
    assert.deepEqual(Object.keys(JSON.parse(answer.body)).sort(), ['error', 'message'])
    assert.equal(JSON.parse(answer.body).error, 503)
  }

  const latencies = sent.map(({ sentAt, answeredAt }) => answeredAt - sentAt).sort((a, b) => a - b)
  t.diagnostic(`POST latency p50 ${percentile(latencies, 0.5)} ms, p99 ${percentile(latencies, 0.99)} ms, max ${latencies.at(-1)} ms`)
  assert.ok(percentile(latencies, 0.99) <= 3000, `p99 ${percentile(latencies, 0.99)} ms`)

  assert.ok(read.length >= LOCK_MS / 100 / 2, `reads were made during the lock: ${read.length}`)
  assert.ok(read.every(({ status }) => status === 200), 'every read during the lock answered 200')
  const slowestRead = Math.max(...read.map(({ ms }) => ms))
  t.diagnostic(`slowest read during the lock: ${slowestRead} ms`)
  // Far inside the 8 s lock, which a read waiting on it would show; not tighter: on a loaded 2-core
  // machine the event loop itself, answering 400 POSTs a second, once held a read 1.1 s.
  assert.ok(slowestRead <= 2000, `reads within 2 s: ${slowestRead} ms`)

  const firstSuccess = Math.min(...sent.filter(({ status, answeredAt }) => status === 200 && answeredAt >= releasedAt).map(({ answeredAt }) => answeredAt))
  t.diagnostic(`first 200 after the release: ${firstSuccess - releasedAt} ms`)
  assert.ok(firstSuccess - releasedAt <= 3000, 'writes succeed again within 3 s of the release')
  assert.ok(sent.filter(({ sentAt }) => sentAt >= releasedAt + 1000).every(({ status }) => status === 200), 'and keep succeeding')

  const peak = peakMiB(server.process.pid!)
  t.diagnostic(`server's resident memory peak: ${peak.toFixed(0)} MiB`)
  assert.ok(peak <= 250, `resident memory ${peak.toFixed(0)} MiB`)

  const stored = await storedIds(server)
  const lost = sent.filter(({ status, id }) => status === 200 && !stored.has(id))
  assert.deepEqual(lost.map(({ id }) => id), [], 'every id answered 200 is stored')
  const refusedButStored = sent.filter(({ status, id }) => status === 503 && stored.has(id)).length
  t.diagnostic(`503 answers whose write was stored all the same (retry-safe): ${refusedButStored}`)
})
