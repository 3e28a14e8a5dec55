import assert from 'node:assert/strict'
import { spawn, spawnSync } from 'node:child_process'
import { test } from 'node:test'
import { call, startServer, type Server } from '../helpers.js'

const hasStrace = spawnSync('strace', ['-V']).status === 0
const SEQUENTIAL = 40
const CONCURRENT = 200

/** Counts fsync and fdatasync calls of every thread of the server while `work` runs. */
async function countSyncs (server: Server, work: () => Promise<void>): Promise<number> {
  const tracer = spawn('strace', ['-f', '-c', '-e', 'trace=fsync,fdatasync', '-p', String(server.process.pid)], { stdio: ['ignore', 'ignore', 'pipe'] })
  let report = ''
  tracer.stderr.setEncoding('utf8').on('data', (chunk: string) => { report += chunk })
  await new Promise(resolve => setTimeout(resolve, 500)) // strace attaches to every thread
  await work()
  const done = new Promise(resolve => tracer.once('exit', resolve))
  tracer.kill('SIGINT')
  await done
  return [...report.matchAll(/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$/gm)].reduce((sum, m) => sum + Number(m[1]), 0)
}

test('each acknowledged write was fsynced: N sequential POSTs cause at least N fsyncs', { skip: hasStrace ? false : 'strace is not installed (apt-get install strace); .ci/run installs it' }, async (t) => {
  const server = await startServer(t)
  const syncs = await countSyncs(server, async () => {
    for (let id = 0; id < SEQUENTIAL; id++) {
      assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })).status, 200)
    }
  })
  t.diagnostic(`${SEQUENTIAL} sequential POSTs: ${syncs} fsync/fdatasync calls`)
  assert.ok(syncs >= SEQUENTIAL, `${syncs} syncs for ${SEQUENTIAL} writes`)
})

test('concurrent writes share commits: 200 parallel POSTs need fewer fsyncs than writes', { skip: hasStrace ? false : 'strace is not installed' }, async (t) => {
  const server = await startServer(t)
  const syncs = await countSyncs(server, async () => {
    const answers = await Promise.all(Array.from({ length: CONCURRENT }, (_, id) => call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })))
    assert.ok(answers.every(a => a.status === 200))
  })
  t.diagnostic(`${CONCURRENT} concurrent POSTs: ${syncs} fsync/fdatasync calls`)
  assert.ok(syncs > 0 && syncs < CONCURRENT, `${syncs} syncs for ${CONCURRENT} writes`)
})
