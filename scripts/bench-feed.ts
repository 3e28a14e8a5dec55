// The change feed's throughput: changes per second delivered as Server-Sent Events to 1 and to
// 100 readers, by the built service on a fresh SQLite file (issue 18).
//   npm run bench:feed        BENCH_FEED_CHANGES (20000)  BENCH_FEED_READERS (1,100)
// Two figures per reader count:
//   catch-up  the log holds the changes already; every reader follows it from position 0 to the
//             head: the feed's own pace (reads of the log, framing, socket writes).
//   live      the readers are connected while the changes are written (64 writers over HTTP):
//             what the readers receive per second, and how late the last change reaches the last reader.
// The service runs pinned to CPU 0; the writers and readers (this process) to CPU 1.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { request } from 'node:http'
import { availableParallelism, tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'

const ROOT = resolve(import.meta.dirname, '..')
const CHANGES = Number(process.env.BENCH_FEED_CHANGES ?? 20_000)
const READERS = (process.env.BENCH_FEED_READERS ?? '1,100').split(',').map(Number)
const PINNED = availableParallelism() >= 2
const taskset = (cpu: number, command: string[]): string[] => PINNED ? ['taskset', '-c', String(cpu), ...command] : command

interface Service { url: string, token: string, child: ChildProcess, dir: string }

async function startService (): Promise<Service> {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-bench-feed-'))
  const env = { PATH: process.env.PATH ?? '', DATABASE_URL: join(dir, 'plantstore.db'), HOST: '127.0.0.1', PORT: '0', LOG_LEVEL: 'info', RATE_LIMIT_PER_MINUTE: '0' }
  const made = spawnSync(process.execPath, ['dist/cli/main.js', 'tokens', 'create', '--name', 'bench'], { cwd: ROOT, env, encoding: 'utf8' })
  if (made.status !== 0) throw new Error(`tokens create failed: ${made.stderr}`)
  const [command, ...args] = taskset(0, [process.execPath, '--max-semi-space-size=8', 'dist/cli/main.js', 'serve'])
  const child = spawn(command, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'inherit'] })
  let out = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { out += chunk })
  for (const deadline = Date.now() + 20_000; ;) {
    const url = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1]
    if (url !== undefined) {
      child.stdout!.resume() // the log goes on; it is not kept
      out = ''
      return { url, token: made.stdout.trim(), child, dir }
    }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the service did not start:\n${out}`)
    await sleep(50)
  }
}

async function stopService (service: Service): Promise<void> {
  const exited = new Promise(resolve => service.child.once('exit', resolve))
  service.child.kill('SIGTERM')
  await exited
  rmSync(service.dir, { recursive: true, force: true })
}

/** Writes `count` plants from `writers` concurrent clients; answers the writes per second. */
async function write (service: Service, count: number, writers: number, firstId: number): Promise<number> {
  let next = 0
  const started = performance.now()
  await Promise.all(Array.from({ length: writers }, async () => {
    for (let n = next++; n < count; n = next++) {
      const response = await fetch(`${service.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${service.token}`, 'content-type': 'application/json' },
        body: `{"id":${firstId + n},"name":"Plant ${firstId + n}","tag":"bench"}`
      })
      await response.arrayBuffer()
      if (response.status !== 200) throw new Error(`POST answered ${response.status}`)
    }
  }))
  return count / ((performance.now() - started) / 1000)
}

/** A reader following the stream from `after`: resolves with the time (performance.now()) it received position `until`. */
function follow (service: Service, after: number, until: number): { reached: Promise<number>, close: () => void } {
  let close = (): void => {}
  const reached = new Promise<number>((resolve, reject) => {
    const req = request(`${service.url}/plants/changes?after=${after}`, { headers: { accept: 'text/event-stream', authorization: `Bearer ${service.token}` } }, (res) => {
      if (res.statusCode !== 200) { reject(new Error(`the stream answered ${res.statusCode}`)); return }
      res.setEncoding('utf8')
      let tail = ''
      res.on('data', (chunk: string) => {
        const text = tail + chunk
        const cut = text.lastIndexOf('\n\n')
        tail = text.slice(cut + 2)
        const last = /id: (\d+)\nevent: plant\.[a-z]+\n[^\n]*\n$/.exec(text.slice(0, cut + 1))
        if (last !== null && Number(last[1]) >= until) { resolve(performance.now()); req.destroy() }
      })
      res.on('end', () => reject(new Error('the stream ended early')))
    })
    req.on('error', (error) => { if (!req.destroyed) reject(error) })
    req.end()
    close = () => req.destroy()
  })
  return { reached, close }
}

async function catchUp (readers: number): Promise<{ perReader: number, total: number }> {
  const service = await startService()
  try {
    await write(service, CHANGES, 64, 0)
    const started = performance.now()
    const followers = Array.from({ length: readers }, () => follow(service, 0, CHANGES))
    const last = Math.max(...await Promise.all(followers.map(async f => await f.reached)))
    const seconds = (last - started) / 1000
    return { perReader: CHANGES / seconds, total: CHANGES * readers / seconds }
  } finally {
    await stopService(service)
  }
}

async function live (readers: number): Promise<{ writesPerSecond: number, total: number, lastLagMs: number }> {
  const service = await startService()
  try {
    const followers = Array.from({ length: readers }, () => follow(service, 0, CHANGES))
    await sleep(500)
    const started = performance.now()
    const writesPerSecond = await write(service, CHANGES, 64, 0)
    const written = performance.now()
    const last = Math.max(...await Promise.all(followers.map(async f => await f.reached)))
    return { writesPerSecond, total: CHANGES * readers / ((last - started) / 1000), lastLagMs: last - written }
  } finally {
    await stopService(service)
  }
}

if (PINNED) spawnSync('taskset', ['-pc', '1', String(process.pid)]) // this process (writers, readers) on CPU 1
const rows: string[] = []
for (const readers of READERS) {
  process.stderr.write(`${readers} reader(s): catch-up over ${CHANGES} changes\n`)
  const up = await catchUp(readers)
  process.stderr.write(`${readers} reader(s): live, ${CHANGES} changes written by 64 writers\n`)
  const on = await live(readers)
  rows.push(`| ${readers} | ${Math.round(up.perReader)} | ${Math.round(up.total)} | ${Math.round(on.writesPerSecond)} | ${Math.round(on.total)} | ${on.lastLagMs.toFixed(0)} |`)
}
console.log(`${CHANGES} changes; service pinned to CPU 0, writers and readers to CPU 1: ${PINNED ? 'yes' : 'no (one CPU)'}\n`)
console.log('| readers | catch-up: changes/s per reader | catch-up: changes/s delivered, all readers | live: writes/s | live: changes/s delivered, all readers | live: last change to last reader, ms after the last write |')
console.log('| --- | --- | --- | --- | --- | --- |')
console.log(rows.join('\n'))
