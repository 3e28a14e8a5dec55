// CPU per write of the SQLite store alone, without HTTP: the store's share of a POST.
// Usage: npm run bench:writes [-- WRITES BATCH], defaults 20000 writes in batches of 36 (about what
// group commit gathered under the HTTP bench's 64 connections, see docs/performance.md). Run it a
// few times: the VM is noisy.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SqliteStore } from '../src/store/sqlite.js'

const [writes, batch] = [Number(process.argv[2] ?? 20_000), Number(process.argv[3] ?? 36)]
const dir = mkdtempSync(join(tmpdir(), 'plantstore-bench-writes-'))
const store = new SqliteStore(join(dir, 'plantstore.db'))
let nextId = 1n

/** `count` creates, `batch` at a time: each batch is asked for in one turn, so it is one commit. */
async function create (count: number): Promise<void> {
  for (let done = 0; done < count; done += batch) {
    await Promise.all(Array.from({ length: batch }, () => store.create({ id: nextId, name: `Plant ${nextId++}`, tag: 'bench' })))
  }
}

try {
  await create(5_000) // warm-up: JIT and the checkpoint thread
  const before = { ...store.stats }
  const cpu = process.cpuUsage()
  const start = performance.now()
  await create(writes)
  const { user, system } = process.cpuUsage(cpu) // every thread of the process, the writer's included
  const seconds = (performance.now() - start) / 1000
  const commits = store.stats.transactions - before.transactions
  console.log(`${writes} writes in batches of ${batch}: ${((user + system) / writes).toFixed(2)} µs of CPU per write ` +
    `(user ${(user / writes).toFixed(2)}, system ${(system / writes).toFixed(2)}), ${Math.round(writes / seconds)} writes/s, ` +
    `${commits} commits (${((store.stats.writes - before.writes) / commits).toFixed(1)} writes each)`)
} finally {
  await store.close()
  rmSync(dir, { recursive: true, force: true })
}
