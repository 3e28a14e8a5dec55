import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { connect, type Socket } from 'node:net'
import { test } from 'node:test'
import { call, startServer, tempDir, type Server } from '../helpers.js'

const hasStrace = spawnSync('strace', ['-V']).status === 0
const skip = hasStrace ? false : 'strace is not installed (apt-get install strace); .ci/run installs it'
const SEQUENTIAL = 40
const SIMULTANEOUS = 200
const ORDERED = 20

/**
 * Runs the server under strace, counting fsync and fdatasync calls of all its threads (seccomp-bpf
 * keeps the tracing cheap, so timing stays realistic), does `work`, stops the server with SIGTERM
 * and returns the count.
 */
async function countSyncs (t: Parameters<typeof startServer>[0], work: (server: Server) => Promise<void>): Promise<number> {
  const server = await startServer(t, { wrapper: ['strace', '-f', '--seccomp-bpf', '-c', '-e', 'trace=fsync,fdatasync'] })
  await work(server)
  await stopTraced(server)
  return [...server.stderr().matchAll(/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0)
}

/** Stops a server started under strace: SIGTERM to node, strace's child, then waits for both. */
async function stopTraced (server: Server): Promise<void> {
  const node = Number(readFileSync(`/proc/${server.process.pid}/task/${server.process.pid}/children`, 'utf8').trim().split(' ')[0])
  process.kill(node, 'SIGTERM')
  await server.exited
}

/**
 * Reads an strace log (`-f -y`, one line per call, a line of its own for a call's end when
 * threads interleave) and returns, in order, the calls that matter: a write to the WAL ended, an
 * fdatasync of the WAL began or ended, a 200 answer was written to a socket.
 */
function walEvents (log: string): Array<'wal-write' | 'sync-start' | 'sync-end' | 'answer'> {
  const events: Array<'wal-write' | 'sync-start' | 'sync-end' | 'answer'> = []
  const unfinished = new Map<string, string>() // pid -> what its unfinished call was
  for (const line of log.split('\n')) {
    const pid = line.split(' ', 1)[0]
    const resumed = /<\.\.\. (\w+) resumed>.*= (-?\d+)/.exec(line)
    if (resumed !== null) {
      const what = unfinished.get(pid)
      unfinished.delete(pid)
      if (what === 'wal-write' && Number(resumed[2]) > 0) events.push('wal-write')
      if (what === 'sync' && resumed[2] === '0') events.push('sync-end')
      continue
    }
    const call = /^\d+ +(\w+)\(\d+<([^>]*)>/.exec(line.replace(/^(\d+)\s+/, '$1 '))
    if (call === null) continue
    const [, name, target] = call
    const done = / = (-?\d+)/.exec(line)?.[1]
    const toWal = target.endsWith('.db-wal')
    if (name === 'pwrite64' && toWal) {
      if (done === undefined) unfinished.set(pid, 'wal-write')
      else if (Number(done) > 0) events.push('wal-write')
    } else if (name === 'fdatasync' && toWal) {
      events.push('sync-start')
      if (done === undefined) unfinished.set(pid, 'sync')
      else if (done === '0') events.push('sync-end')
    } else if ((name === 'write' || name === 'writev') && /^(TCP|socket)/.test(target) && line.includes('HTTP/1.1 200')) {
      events.push('answer')
    }
  }
  return events
}

test(`each answer leaves after its commit was written to the WAL and an fdatasync of the WAL begun after that write returned (${ORDERED} POSTs)`, { skip }, async (t) => {
  const log = join(tempDir(t), 'strace.log')
  const server = await startServer(t, { wrapper: ['strace', '-f', '-y', '-qq', '-o', log, '-e', 'trace=pwrite64,fdatasync,write,writev'] })
  for (let id = 0; id < ORDERED; id++) {
    assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })).status, 200)
  }
  await stopTraced(server)
  let written = false // a write to the WAL ended since the last answer
  let syncBegun = false // an fdatasync of the WAL began after the last such write
  let durable = false // and it returned
  let answers = 0
  for (const event of walEvents(readFileSync(log, 'utf8'))) {
    if (event === 'wal-write') { written = true; syncBegun = false; durable = false }
    if (event === 'sync-start' && written) syncBegun = true
    if (event === 'sync-end' && syncBegun) durable = true
    if (event === 'answer') {
      answers++
      assert.ok(written, `answer ${answers}: its commit was written to the WAL before it left`)
      assert.ok(durable, `answer ${answers}: an fdatasync of the WAL, begun after that write, returned before it left`)
      written = syncBegun = durable = false
    }
  }
  assert.equal(answers, ORDERED, 'every 200 was seen leaving')
})

/** Opens `count` connections, then sends one POST on each at the same moment; resolves with the status lines. */
async function postAtOnce (server: Server, count: number): Promise<string[]> {
  const { port } = new URL(server.url)
  const sockets = await Promise.all(Array.from({ length: count }, () => new Promise<Socket>((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1', () => resolve(socket)).on('error', reject)
  })))
  return await Promise.all(sockets.map((socket, id) => new Promise<string>((resolve) => {
    let text = ''
    socket.setEncoding('utf8').on('data', (chunk: string) => { text += chunk }).on('close', () => resolve(text.split('\r\n')[0]))
    const body = JSON.stringify({ id, name: `p${id}` })
    socket.write(`POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${server.token}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`)
  })))
}

test(`each acknowledged write was fsynced: ${SEQUENTIAL} sequential POSTs cause at least ${SEQUENTIAL} fsyncs`, { skip }, async (t) => {
  const baseline = await countSyncs(t, async () => {}) // start-up and shutdown sync too
  const syncs = await countSyncs(t, async (server) => {
    for (let id = 0; id < SEQUENTIAL; id++) {
      assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })).status, 200)
    }
  }) - baseline
  t.diagnostic(`${SEQUENTIAL} sequential POSTs: ${syncs} fsync/fdatasync calls beyond start-up and shutdown (${baseline})`)
  assert.ok(syncs >= SEQUENTIAL, `${syncs} syncs for ${SEQUENTIAL} writes`)
})

test(`concurrent writes share commits: ${SIMULTANEOUS} simultaneous POSTs need far fewer fsyncs`, { skip }, async (t) => {
  const baseline = await countSyncs(t, async () => {})
  const syncs = await countSyncs(t, async (server) => {
    const statuses = await postAtOnce(server, SIMULTANEOUS)
    assert.deepEqual([...new Set(statuses)], ['HTTP/1.1 200 OK'])
  }) - baseline
  t.diagnostic(`${SIMULTANEOUS} simultaneous POSTs: ${syncs} fsync/fdatasync calls beyond start-up and shutdown (${baseline})`)
  // How many writes share a commit depends on how fast the disk syncs (test/store shows the exact
  // batching); here it is enough that some did: one fsync per write would be 200.
  assert.ok(syncs > 0 && syncs < SIMULTANEOUS, `${syncs} syncs for ${SIMULTANEOUS} writes`)
})
