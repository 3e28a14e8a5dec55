import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { connect, type Socket } from 'node:net'
import { test } from 'node:test'
import { call, startServer, type Server } from '../helpers.js'

const hasStrace = spawnSync('strace', ['-V']).status === 0
const skip = hasStrace ? false : 'strace is not installed (apt-get install strace); .ci/run installs it'
const SEQUENTIAL = 40
const SIMULTANEOUS = 200

/**
 * Runs the server under strace, counting fsync and fdatasync calls of all its threads (seccomp-bpf
 * keeps the tracing cheap, so timing stays realistic), does `work`, stops the server with SIGTERM
 * and returns the count.
 */
async function countSyncs (t: Parameters<typeof startServer>[0], work: (server: Server) => Promise<void>): Promise<number> {
  const server = await startServer(t, { wrapper: ['strace', '-f', '--seccomp-bpf', '-c', '-e', 'trace=fsync,fdatasync'] })
  await work(server)
  const node = Number(readFileSync(`/proc/${server.process.pid}/task/${server.process.pid}/children`, 'utf8').trim().split(' ')[0])
  process.kill(node, 'SIGTERM')
  await server.exited
  return [...server.stderr().matchAll(/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0)
}

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
