import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { call, cli, cliAsync, MAIN, startServer, tempDir } from '../helpers.js'

test('plantstore backup copies a live store consistently, while plants are being written', async (t) => {
  const dir = tempDir(t)
  const dbPath = join(dir, 'plantstore.db')
  assert.equal(cli(dir, ['migrate']).status, 0)
  // A store of some size, so the copy takes more than an instant.
  const seed = openDatabase(dbPath)
  const insert = seed.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)')
  seed.transaction(() => { for (let id = 1; id <= 20_000; id++) insert.run(id, `Seeded plant ${id}`, 'seed') })()
  seed.close()
  const server = await startServer(t, { dir })

  const acknowledged: number[] = []
  let id = 100_000
  const writeUntil = async (done: () => boolean): Promise<void> => {
    while (!done()) {
      const batch = Array.from({ length: 10 }, () => ++id)
      const answers = await Promise.all(batch.map(n => call(server, 'POST', '/plants', { body: { id: n, name: `Plant ${n}` } })))
      answers.forEach((answer, i) => { if (answer.status === 200) acknowledged.push(batch[i]) })
    }
  }
  await writeUntil(() => acknowledged.length >= 100)
  const beforeBackup = [...acknowledged]
  const copyPath = join(dir, 'copy.db')
  let finished = false
  const backup = cliAsync(['backup', copyPath], { DATABASE_URL: dbPath }).finally(() => { finished = true })
  await writeUntil(() => finished)
  const result = await backup
  assert.equal(result.status, 0, result.stderr)
  assert.ok(acknowledged.length > beforeBackup.length, 'writes went on while the backup ran')

  assert.equal(statSync(copyPath).mode & 0o777, 0o600)
  assert.deepEqual(readdirSync(dir).filter(file => file.startsWith('copy.db') || file.startsWith('.copy.db')), ['copy.db'], 'no -wal, no partial file')
  const copy = openDatabase(copyPath, { readonly: true, fileMustExist: true })
  t.after(() => copy.close())
  assert.equal(copy.pragma('integrity_check', { simple: true }), 'ok')
  assert.equal(copy.pragma('journal_mode', { simple: true }), 'delete')
  const ids = new Set((copy.prepare('SELECT id FROM plants').pluck().all() as number[]))
  assert.equal(copy.prepare('SELECT count(*) FROM plants WHERE id <= 20000').pluck().get(), 20_000)
  for (const n of beforeBackup) assert.ok(ids.has(n), `plant ${n} was acknowledged before the backup began`)
  assert.equal(copy.prepare('SELECT count(*) FROM tokens').pluck().get(), 1)
})

test('plantstore backup removes what a backup to the same FILE killed part way left (kill -9: no cleanup ran), not what one running leaves', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const gone = spawnSync(process.execPath, ['-e', '']).pid! // a process that has ended: its partial copy is abandoned
  const abandoned = [`.copy.db.partial-${gone}`, `.copy.db.partial-${gone}-journal`]
  const running = [`.copy.db.partial-${process.pid}`, `.other.db.partial-${gone}`] // a backup under way (this process), another FILE's
  for (const name of [...abandoned, ...running]) writeFileSync(join(dir, name), 'part')
  const result = cli(dir, ['backup', join(dir, 'copy.db')])
  assert.equal(result.status, 0, result.stderr)
  assert.deepEqual(readdirSync(dir).filter(name => name.includes('.partial-')).sort(), [...running].sort())
})

test('plantstore backup never overwrites a file, and says why in one line', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const target = join(dir, 'precious.db')
  writeFileSync(target, 'keep me')
  const result = cli(dir, ['backup', target])
  assert.equal(result.status, 1)
  assert.equal(result.stderr, `plantstore: ${target} already exists; a backup never overwrites a file, so remove it or choose another name.\n`)
  assert.equal(statSync(target).size, 'keep me'.length)
})

test('plantstore backup refuses a missing store, a missing directory and PostgreSQL with one line each', (t) => {
  const dir = tempDir(t)
  const missing = cli(dir, ['backup', join(dir, 'copy.db')])
  assert.equal(missing.status, 1)
  assert.match(missing.stderr, /^plantstore: There is no store at .*plantstore\.db to back up\.\n$/)
  assert.equal(existsSync(join(dir, 'plantstore.db')), false, 'backup does not create a store')
  // Nor is an empty file a store to back up (export refuses it alike): it is left as it was.
  writeFileSync(join(dir, 'plantstore.db'), '')
  const empty = cli(dir, ['backup', join(dir, 'copy.db')])
  assert.equal(empty.status, 1)
  assert.match(empty.stderr, /^plantstore: There is no store at .*plantstore\.db to back up\.\n$/)
  assert.equal(readFileSync(join(dir, 'plantstore.db'), 'utf8'), '')
  assert.equal(existsSync(join(dir, 'copy.db')), false)

  assert.equal(cli(dir, ['migrate']).status, 0)
  const noDir = cli(dir, ['backup', join(dir, 'no', 'such', 'copy.db')])
  assert.equal(noDir.status, 1)
  assert.match(noDir.stderr, /^plantstore: Cannot write the backup .*: the directory does not exist\.\n$/)

  const postgres = cli(dir, ['backup', join(dir, 'copy.db'), '--database-url', 'postgres://db.example/plants'])
  assert.equal(postgres.status, 1)
  assert.equal(postgres.stderr, 'plantstore: backup copies SQLite stores only; for PostgreSQL, use pg_dump.\n')
})

test('plantstore backup refuses a FILE that names a directory, or that SQLite would take for one of the store\'s own files, before copying anything', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  for (const file of [join(dir, 'sub') + '/', dir + '/', dir]) {
    const result = cli(dir, ['backup', file])
    assert.equal(result.status, 1)
    assert.equal(result.stderr, `plantstore: The backup's FILE ${file} names a directory; name the file to write.\n`)
  }
  assert.deepEqual(readdirSync(dir).filter(name => !name.startsWith('plantstore.db')), [], 'nothing written')
  for (const suffix of ['-journal', '-wal', '-shm']) {
    const file = join(dir, `plantstore.db${suffix}`)
    const result = cli(dir, ['backup', file])
    assert.equal(result.status, 1, suffix)
    assert.equal(result.stderr, `plantstore: ${file} is a name SQLite keeps for the store's own files; choose another.\n`)
  }
  // Reached through a symbolic link to the store's directory too.
  const link = join(tempDir(t), 'link')
  symlinkSync(dir, link)
  const through = cli(dir, ['backup', join(link, 'plantstore.db-journal')])
  assert.equal(through.status, 1)
  assert.match(through.stderr, /is a name SQLite keeps for the store's own files/)
  assert.equal(existsSync(join(dir, 'plantstore.db-journal')), false, 'no -journal beside the store')
})

test('plantstore backup refuses an empty FILE before copying anything', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['migrate']).status, 0)
  const result = cli(dir, ['backup', ''])
  assert.equal(result.status, 1)
  assert.equal(result.stderr, 'plantstore: backup needs the FILE to write; see plantstore backup --help.\n')
  assert.deepEqual(readdirSync(dir).filter(name => name.includes('partial')), [])
})

/** A store of 400,000 plants (about 30 MB) in a new directory: a copy of it takes a while. */
function storeOf400000Plants (t: TestContext): { dir: string, dbPath: string } {
  const dir = tempDir(t)
  const dbPath = join(dir, 'plantstore.db')
  assert.equal(cli(dir, ['migrate']).status, 0)
  const seed = openDatabase(dbPath)
  seed.exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400000) INSERT INTO plants (id, name) SELECT i, 'a plant with a longish name, number ' || i FROM n")
  seed.close()
  return { dir, dbPath }
}

test('plantstore backup stopped by SIGTERM or SIGINT while it copies leaves no partial copy behind (a copy made whole before the stop stays whole)', async (t) => {
  const { dir, dbPath } = storeOf400000Plants(t)
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    const target = join(dir, `copy-${signal}.db`)
    const child = spawn(process.execPath, [MAIN, 'backup', target], { env: { ...process.env, DATABASE_URL: dbPath }, stdio: ['ignore', 'ignore', 'pipe'] })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
    // Stopped once its partial copy exists: while it copies.
    while (!readdirSync(dir).some(name => name.includes('partial'))) await new Promise(resolve => setTimeout(resolve, 2))
    child.kill(signal)
    const status = await exited
    assert.deepEqual(readdirSync(dir).filter(name => name.includes('partial')), [], `nothing left under a temporary name (${signal}, exit ${status}: ${stderr})`)
    if (existsSync(target)) {
      const copy = openDatabase(target, { readonly: true })
      assert.equal((copy.prepare('SELECT count(*) AS n FROM plants').get() as { n: number }).n, 400000, 'a copy that is there is whole')
      copy.close()
    }
  }
})

test('plantstore backup stopped by SIGINT part way through a slow copy stops then: exit 130, no copy, nothing under a temporary name (the copy goes in steps, and the stop is seen between two)', async (t) => {
  const { dir, dbPath } = storeOf400000Plants(t)
  const target = join(dir, 'copy.db')
  // Each page written to the copy takes 2 ms more (after the first 200): the copy takes tens of seconds.
  const traced = spawn('strace', ['-f', '-qq', '-o', '/dev/null', '-e', 'trace=pwrite64', '-e', 'inject=pwrite64:delay_exit=2000:when=200+', process.execPath, MAIN, 'backup', target],
    { env: { ...process.env, DATABASE_URL: dbPath }, stdio: ['ignore', 'ignore', 'pipe'] })
  t.after(() => { traced.kill('SIGKILL') })
  let stderr = ''
  traced.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>(resolve => traced.once('exit', resolve))
  while (!readdirSync(dir).some(name => name.includes('partial'))) await new Promise(resolve => setTimeout(resolve, 10))
  await new Promise(resolve => setTimeout(resolve, 1000))
  // The signal goes to node itself, strace's child.
  const node = Number(readFileSync(`/proc/${traced.pid!}/task/${traced.pid!}/children`, 'utf8').trim().split(' ')[0])
  const signalled = Date.now()
  process.kill(node, 'SIGINT')
  assert.equal(await exited, 130, stderr)
  assert.ok(Date.now() - signalled < 8000, `stopped ${Date.now() - signalled} ms after the signal`)
  assert.match(stderr, /plantstore: stopped by SIGINT\.\n/)
  assert.deepEqual(readdirSync(dir).filter(name => name.startsWith('copy') || name.includes('partial')), [], 'no copy, nothing left under a temporary name')
})
