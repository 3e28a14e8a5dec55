// plantstore export and import, end to end: real SQLite files, a PostgreSQL schema per test
// (when TEST_DATABASE_URL is set), the built CLI in child processes, a real server writing.
import assert from 'node:assert/strict'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { spawn, spawnSync } from 'node:child_process'
import { closeSync, constants, existsSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, statSync, writeFileSync, writeSync } from 'node:fs'
import { Readable } from 'node:stream'
import { join } from 'node:path'
import { test, type TestContext } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { importFrom } from '../../src/cli/import.js'
import { ConfigError } from '../../src/config.js'
import { parseJson } from '../../src/json.js'
import { SqliteStore } from '../../src/store/sqlite.js'
import type { PlantRecord } from '../../src/store/store.js'
import { call, cli, isErrorBody, MAIN, startServer, tempDir, type Server } from '../helpers.js'
import { plantsBySql } from '../stored.js'
import { adminQuery, PG_SKIP, PG_URL, pgSchema } from '../store/postgres-helpers.js'

const INT64_MIN = -(2n ** 63n)
const INT64_MAX = 2n ** 63n - 1n
const EXPORT_FAILED = 'plantstore export failed here; the lines above are not all the plants.'

interface Run { status: number | null, stdout: Buffer, stderr: string }

/** The CLI with `input` on stdin (none: an empty stdin), on the store DATABASE_URL names. */
function run (args: string[], databaseUrl: string, input: Buffer | string = ''): Run {
  const result = spawnSync(process.execPath, [MAIN, ...args], {
    env: { ...process.env, DATABASE_URL: databaseUrl },
    input,
    maxBuffer: 256 * 1024 * 1024
  })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr.toString('utf8') }
}

/** The bytes `io` moved, or undefined where a non-blocking descriptor would have had to wait. */
function tryIo (io: () => number): number | undefined {
  try {
    return io()
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EAGAIN') return undefined
    throw error
  }
}

/** The first bytes that arrive on the non-blocking `reader`, waited for up to 10 s; `why` says what was seen when none came. */
async function firstBytes (reader: number, why: () => string): Promise<Buffer> {
  const buffer = Buffer.alloc(65536)
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(10)) {
    const read = tryIo(() => readSync(reader, buffer))
    if (read !== undefined && read > 0) return Buffer.from(buffer.subarray(0, read))
  }
  throw new Error(`nothing written within 10 s: ${why()}`)
}

/** What the non-blocking `reader` gives until its pipe ends (10 s at most), waiting while it is empty. */
async function readToEnd (reader: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  const buffer = Buffer.alloc(65536)
  const deadline = Date.now() + 10_000
  for (let read = tryIo(() => readSync(reader, buffer)); read !== 0 && Date.now() < deadline; read = tryIo(() => readSync(reader, buffer))) {
    if (read === undefined) await sleep(10)
    else chunks.push(Buffer.from(buffer.subarray(0, read)))
  }
  return Buffer.concat(chunks)
}

/** A SQLite store at `path` holding plants 1 to `count`, named by number, tagged where `tag` (SQL of `i`) gives one. */
function numberedStore (path: string, count: number, tag = 'NULL'): void {
  assert.equal(run(['migrate'], path).status, 0)
  const db = openDatabase(path)
  db.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count}) INSERT INTO plants (id, name, tag) SELECT i, 'plant number ' || i, ${tag} FROM n`)
  db.close()
}

const byId = (a: PlantRecord, b: PlantRecord): number => a.id < b.id ? -1 : a.id > b.id ? 1 : 0

const TEXTS = ['Fern', 'Kaktus 🌵', '𝔉𝔢𝔯𝔫 𝔞𝔫𝔡 🪴', 'שרך ירוק', 'سرخس أخضر', 'e\u0301te\u0301', '"quoted" and \\back\\slashes', 'tab\tline\nbreak\r', '\u2028\u2029', '\u0001\u001f\u007f', '中文名字', '\ufeffbom inside', '  spaced  ', 'ﬃ Ω≈ç √∫']

/**
 * `count` plants with distinct ids: the int64 extremes, 2^53 ± 1 either side, 0 and ±1, then
 * pseudo-random int64s; names and tags from edge to edge of the schema (one character, 200
 * astral characters, control characters, RTL text, combining marks), a third without a tag.
 */
function interestingPlants (count: number): PlantRecord[] {
  const ids = new Set([INT64_MIN, INT64_MAX, INT64_MIN + 1n, INT64_MAX - 1n, 2n ** 53n - 1n, 2n ** 53n, 2n ** 53n + 1n, -(2n ** 53n) - 1n, -(2n ** 53n) + 1n, 0n, 1n, -1n])
  for (let x = 0x9e3779b97f4a7c15n; ids.size < count;) {
    x = (x * 6364136223846793005n + 1442695040888963407n) & (2n ** 64n - 1n)
    ids.add(BigInt.asIntN(64, x))
  }
  return [...ids].map((id, i) => {
    const name = i % 50 === 0 ? '🌵'.repeat(200) : i % 50 === 1 ? 'x' : i % 50 === 2 ? ' ' : `${TEXTS[i % TEXTS.length]} ${i}`
    if (i % 3 === 0) return { id, name }
    const tag = i % 50 === 5 ? '' : i % 50 === 7 ? 'ω'.repeat(100) : TEXTS[(i * 7) % TEXTS.length]
    return { id, name, tag }
  })
}

/** A migrated SQLite store in `dir` holding `plants`, written directly. */
function sqliteStoreWith (dir: string, plants: PlantRecord[], file = 'plantstore.db'): string {
  const path = join(dir, file)
  assert.equal(run(['migrate'], path).status, 0)
  const db = openDatabase(path)
  const insert = db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)')
  db.transaction(() => { for (const plant of plants) insert.run(plant.id, plant.name, plant.tag ?? null) })()
  db.close()
  return path
}

/** An export's lines read back with the project's exact JSON reader. */
function parseExport (output: Buffer): PlantRecord[] {
  const text = output.toString('utf8')
  assert.ok(text === '' || text.endsWith('\n'), 'every line ends with a line break')
  return text.split('\n').slice(0, -1).map(line => {
    const { id, ...rest } = parseJson(line) as { id: number | bigint, name: string, tag?: string }
    assert.deepEqual(Object.keys(parseJson(line) as object), rest.tag === undefined ? ['id', 'name'] : ['id', 'name', 'tag'], line)
    return { id: BigInt(id), ...rest }
  })
}

function exportOf (databaseUrl: string, plants: number): Buffer {
  const result = run(['export'], databaseUrl)
  assert.equal(result.status, 0, result.stderr)
  assert.equal(result.stderr, `Exported ${plants} plant${plants === 1 ? '' : 's'}.\n`)
  return result.stdout
}

function importInto (databaseUrl: string, input: Buffer | string, plants: number, args: string[] = []): void {
  const result = run(['import', ...args], databaseUrl, input)
  assert.equal(result.status, 0, result.stderr)
  assert.match(result.stderr, new RegExp(`(^|\\n)Imported ${plants} plants?\\.\\n$`))
  assert.equal(result.stdout.length, 0)
}

/** Exports the 10,000 plants of a SQLite store, imports them through `stores` in turn, and compares every record at each step. */
async function roundTrip (t: TestContext, via: 'sqlite' | 'postgres'): Promise<void> {
  const dir = tempDir(t)
  const plants = interestingPlants(10_000)
  const expected = [...plants].sort(byId)
  const source = sqliteStoreWith(dir, plants)
  const token = run(['tokens', 'create', '--name', 'mover'], source)
  assert.equal(token.status, 0)

  const exported = exportOf(source, 10_000)
  assert.deepEqual(parseExport(exported), expected)
  assert.ok(!exported.includes(token.stdout.toString().trim()) && !exported.includes('mover'), 'no token in the export')

  let middle: Buffer
  if (via === 'postgres') {
    const { url, schema } = await pgSchema(t)
    importInto(url, exported, 10_000)
    assert.deepEqual(await plantsBySql({ store: 'postgres', databaseUrl: url }), expected)
    assert.equal((await adminQuery(`SELECT count(*)::int AS n FROM ${schema}.tokens`)).rows[0].n, 0, 'tokens stay behind')
    middle = exportOf(url, 10_000)
  } else {
    const copy = join(dir, 'copy.db')
    importInto(copy, exported, 10_000)
    assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: copy }), expected)
    middle = exportOf(copy, 10_000)
  }
  assert.ok(middle.equals(exported), 'the second export is the first, byte for byte')

  const back = join(dir, 'back.db')
  importInto(back, middle, 10_000)
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: back }), expected)
  assert.ok(exportOf(back, 10_000).equals(exported))
}

test('10,000 plants move SQLite → SQLite → SQLite exactly: int64 extremes, unicode, with and without tags; tokens stay', async (t) => {
  await roundTrip(t, 'sqlite')
})

test('10,000 plants move SQLite → PostgreSQL → SQLite exactly: int64 extremes, unicode, with and without tags; tokens stay', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  await roundTrip(t, 'postgres')
})

test('import refuses a store that holds plants, in one line naming --replace; --replace swaps the plants and keeps the tokens', async (t) => {
  const dir = tempDir(t)
  const path = sqliteStoreWith(dir, [{ id: 1n, name: 'old' }])
  assert.equal(run(['tokens', 'create', '--name', 'keeper'], path).status, 0)
  const input = '{"id":2,"name":"new","tag":"t"}\n'
  const refused = run(['import'], path, input)
  assert.equal(refused.status, 1)
  assert.equal(refused.stderr, 'plantstore: The store already holds plants, and import fills an empty store only; give --replace to delete its plants first (tokens stay), in the same transaction. Nothing was imported.\n')
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: path }), [{ id: 1n, name: 'old' }])

  importInto(path, input, 1, ['--replace'])
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: path }), [{ id: 2n, name: 'new', tag: 't' }])
  assert.match(run(['tokens', 'list'], path).stdout.toString(), /\tkeeper\t.*\tactive\t/)
})

test('after an import the feed starts anew: an earlier position answers 410 with the Error body; the imported plants carry the new head as their ETag, and the feed goes on from it', async (t) => {
  const server = await startServer(t)
  for (const id of [1, 2]) assert.equal((await call(server, 'POST', '/plants', { body: { id, name: `p${id}` } })).status, 200)
  server.process.kill('SIGTERM')
  await server.exited
  importInto(server.dbPath, '{"id":5,"name":"five"}\n', 1, ['--replace'])
  const again = await startServer(t, { dir: server.dir, token: server.token })
  for (const after of [0, 1, 2]) {
    const gone = await call(again, 'GET', `/plants/changes?after=${after}`)
    assert.ok(isErrorBody(gone, 410), `after=${after}: ${gone.status} ${gone.text}`)
  }
  const list = await call(again, 'GET', '/plants')
  assert.deepEqual(list.body, [{ id: 5, name: 'five' }])
  const head = Number(list.headers.get('changes-position'))
  assert.ok(head > 2, `the log's head moved on past its old head: ${head}`)
  assert.equal((await call(again, 'GET', '/plants/5')).headers.get('etag'), `"${head}"`)
  assert.equal((await call(again, 'PUT', '/plants/5', { body: { name: 'five!' } })).status, 200)
  const next = await call(again, 'GET', `/plants/changes?after=${head}`)
  assert.deepEqual(next.body.map((change: { position: number, type: string }) => [change.position, change.type]), [[head + 1, 'plant.updated']])
})

test('import --replace of no plants at all (what an export killed before its first line leaves) deletes nothing: one line, exit 1; into a store without plants it is no change', async (t) => {
  const dir = tempDir(t)
  const path = sqliteStoreWith(dir, [{ id: 1n, name: 'kept' }])
  for (const input of ['', '\n\n']) {
    const refused = run(['import', '--replace'], path, input)
    assert.equal(refused.status, 1, JSON.stringify(input))
    assert.equal(refused.stderr, 'plantstore: The input holds no plants, so --replace would delete every plant in the store and store none (an export stopped before its first line writes nothing); check the input. Nothing was imported.\n')
    assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: path }), [{ id: 1n, name: 'kept' }])
  }
  const empty = sqliteStoreWith(dir, [], 'empty.db')
  const nothing = run(['import', '--replace'], empty, '')
  assert.equal(nothing.status, 0, nothing.stderr)
  assert.equal(nothing.stderr, 'Imported 0 plants.\n')
})

test('import skips blank lines, takes CRLF line ends and a last line without a line break, and stores a repeated identical plant once', async (t) => {
  const path = join(tempDir(t), 'new.db')
  const input = '{"id":1,"name":"a"}\r\n\n   \n{"id": 2, "name": "b", "tag": "x"}\n{"id":1,"name":"a"}\n\t\n{"id":3,"name":"c"}'
  importInto(path, input, 3)
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: path }), [{ id: 1n, name: 'a' }, { id: 2n, name: 'b', tag: 'x' }, { id: 3n, name: 'c' }])
})

/** 2,500 good plants (stored in three batches before line 2502), a blank line among them, then `bad`, then one more good line. */
function withBadLine (bad: Buffer | string): Buffer {
  const good = Array.from({ length: 2500 }, (_, i) => `{"id":${i + 1},"name":"plant ${i + 1}"}\n`)
  good.splice(99, 0, '\n')
  return Buffer.concat([Buffer.from(good.join('')), Buffer.from(bad), Buffer.from('\n{"id":4000,"name":"after"}\n')])
}

test('a bad line stops the import with one sentence naming it and why, and the store is left as it was (even with --replace)', async (t) => {
  const store = new SqliteStore(join(tempDir(t), 'plantstore.db'))
  t.after(() => store.close())
  await store.create({ id: -5n, name: 'before' })
  const cases: Array<[string, Buffer | string, RegExp]> = [
    ['invalid JSON', '{"id":3000,', /^Line 2502 is not valid JSON; send a JSON object\.$/],
    ['a key twice', '{"id":3000,"name":"a","name":"b"}', /^Line 2502 gives the key "name" twice in one object; send each key once\.$/],
    ['no name', '{"id":3000}', /^Line 2502: `name` is required\.$/],
    ['no id', '{"name":"a"}', /^Line 2502: `id` is required\.$/],
    ['an id above int64', '{"id":9223372036854775808,"name":"a"}', /^Line 2502: `id` must be an integer from -9223372036854775808 to 9223372036854775807\.$/],
    ['an id below int64', '{"id":-9223372036854775809,"name":"a"}', /^Line 2502: `id` must be an integer from/],
    ['an id as a string', '{"id":"3000","name":"a"}', /^Line 2502: `id` must be an integer from/],
    ['a fractional id', '{"id":3000.5,"name":"a"}', /^Line 2502: `id` must be an integer from/],
    ['an extra field', '{"id":3000,"name":"a","colour":"green"}', /^Line 2502: `colour` is not a field of a plant \(id, name, tag\)\.$/],
    ['a null tag', '{"id":3000,"name":"a","tag":null}', /^Line 2502: `tag` must be a string\.$/],
    ['an empty name', '{"id":3000,"name":""}', /^Line 2502: `name` must not be empty\.$/],
    ['a name of 201 characters', `{"id":3000,"name":"${'🌵'.repeat(201)}"}`, /^Line 2502: `name` must be at most 200 characters long\.$/],
    ['a lone surrogate', '{"id":3000,"name":"\\ud800"}', /^Line 2502 holds a lone surrogate \(such as "\\ud800"\), which is not text; send valid Unicode\.$/],
    ['invalid UTF-8', Buffer.from([...Buffer.from('{"id":3000,"name":"a'), 0xff, ...Buffer.from('"}')]), /^Line 2502 is not valid UTF-8 text\.$/],
    ['not an object', '[3000, "a"]', /^Line 2502 must be a JSON object\.$/],
    ['a line over 64 KiB', `{"id":3000,"name":"a"${' '.repeat(70_000)}}`, /^Line 2502 is longer than 64 KiB\.$/],
    ['an id again with another name', '{"id":7,"name":"not plant 7"}', /^Line 2502 gives the id of an earlier line with another name or tag\.$/],
    ['the mark of a failed export', EXPORT_FAILED, /^Line 2502 says that the export which wrote it failed there, so the plants after it are missing\.$/]
  ]
  for (const [name, bad, why] of cases) {
    // In chunks of 4 KiB, as a pipe delivers them: lines cross chunk boundaries.
    const input = withBadLine(bad)
    const chunks = Array.from({ length: Math.ceil(input.length / 4096) }, (_, i) => input.subarray(i * 4096, (i + 1) * 4096))
    await assert.rejects(importFrom(store, Readable.from(chunks), { replace: true }), (error: Error) => {
      assert.ok(error instanceof ConfigError, `${name}: ${error.stack}`)
      assert.ok(error.message.endsWith(' Nothing was imported.'), name)
      assert.match(error.message.slice(0, -' Nothing was imported.'.length), why, name)
      return true
    })
    assert.deepEqual((await store.list({ limit: 10 })).plants, [{ id: -5n, name: 'before' }], `${name}: the store is as it was`)
  }
})

test('plantstore import stopped by a bad line: exit code 1, one line on stderr, nothing on stdout', async (t) => {
  const path = sqliteStoreWith(tempDir(t), [{ id: -5n, name: 'before' }])
  for (const bad of ['{"id":3000,', '{"id":7,"name":"not plant 7"}']) {
    const result = run(['import', '--replace'], path, withBadLine(bad))
    assert.equal(result.status, 1)
    assert.equal(result.stdout.length, 0)
    assert.match(result.stderr, /^plantstore: Line 2502 [^\n]* Nothing was imported\.\n$/)
    assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: path }), [{ id: -5n, name: 'before' }])
  }
})

const SCRIPT = spawnSync('script', ['--version']).status === 0

test('import on a terminal (no input redirected) says how to give it input, instead of waiting, and creates no store', { skip: SCRIPT ? false : 'util-linux script(1), which gives the command a terminal, is not installed' }, (t) => {
  const dir = tempDir(t)
  // script(1) runs the command on a pseudo-terminal, as a user typing it would.
  const result = spawnSync('script', ['-qec', `${JSON.stringify(process.execPath)} ${JSON.stringify(MAIN)} import; echo "exit $?"`, '/dev/null'], {
    env: { ...process.env, DATABASE_URL: join(dir, 'plantstore.db') },
    encoding: 'utf8',
    timeout: 30_000
  })
  assert.equal(result.stdout.replaceAll('\r', ''), 'plantstore: import reads plants from stdin, such as plantstore import < plants.ndjson; see plantstore import --help.\nexit 1\n')
  assert.equal(existsSync(join(dir, 'plantstore.db')), false)
})

test('import from a directory on stdin (`import < /tmp`) fails in one line, exit 1, and creates no store: Node reads such a stdin as empty', (t) => {
  const dir = tempDir(t)
  const input = openSync(dir, 'r')
  t.after(() => closeSync(input))
  const result = spawnSync(process.execPath, [MAIN, 'import'], { env: { ...process.env, DATABASE_URL: join(dir, 'store.db') }, stdio: [input, 'pipe', 'pipe'], encoding: 'utf8' })
  assert.equal(result.status, 1)
  assert.equal(result.stderr, 'plantstore: stdin is a directory; import reads plants from a file or a pipe, such as plantstore import < plants.ndjson.\n')
  assert.deepEqual(readdirSync(dir), [], 'no store made')
})

test('export refuses a SQLite store that does not exist (or a file that holds none), creating nothing; its output, the failure line alone, imports nothing', (t) => {
  const dir = tempDir(t)
  const result = cli(dir, ['export'])
  assert.equal(result.status, 1)
  assert.match(result.stderr, /^plantstore: There is no store at .*plantstore\.db\.\n$/)
  assert.equal(result.stdout, `${EXPORT_FAILED}\n`)
  assert.equal(existsSync(join(dir, 'plantstore.db')), false)
  const imported = run(['import'], join(dir, 'target.db'), result.stdout)
  assert.equal(imported.status, 1)
  assert.match(imported.stderr, /plantstore: Line 1 says that the export which wrote it failed there/)
  // A file that holds no store (empty, or another program's database) is none either, and stays as it was.
  const empty = join(dir, 'empty.db')
  writeFileSync(empty, '')
  const other = join(dir, 'other.db')
  const db = openDatabase(other)
  db.exec('CREATE TABLE notes (text TEXT)')
  db.close()
  for (const path of [empty, other]) {
    const before = readFileSync(path)
    const refused = run(['export'], path)
    assert.equal(refused.status, 1, path)
    assert.equal(refused.stderr, `plantstore: There is no store at ${path}.\n`)
    assert.ok(readFileSync(path).equals(before), 'the file is unchanged')
  }
  // A file SQLite cannot read is said to be that, not a place without a store.
  const garbage = join(dir, 'garbage.db')
  writeFileSync(garbage, Buffer.alloc(8192, 'not a database '))
  const unreadable = run(['export'], garbage)
  assert.equal(unreadable.status, 1)
  assert.equal(unreadable.stderr, `plantstore: Cannot read the database at ${garbage}: file is not a database.\n`)
  const backup = cli(dir, ['backup', join(dir, 'copy.db')], { DATABASE_URL: garbage })
  assert.equal(backup.status, 1)
  assert.equal(backup.stderr, `plantstore: Cannot read the database at ${garbage}: file is not a database.\n`)
  // A store of a newer plantstore is refused as every other command refuses it: its schema would be guessed at.
  const newer = sqliteStoreWith(dir, [{ id: 1n, name: 'Fern' }], 'newer.db')
  const future = openDatabase(newer)
  future.prepare('INSERT INTO schema_version (version, name, applied_at) VALUES (99, ?, 0)').run('099-future.sql')
  future.close()
  const refused = run(['export'], newer)
  assert.equal(refused.status, 1)
  assert.equal(refused.stdout.toString(), `${EXPORT_FAILED}\n`)
  assert.match(refused.stderr, /^plantstore: Cannot open the database at .*newer\.db: The database schema is version 99, newer than this plantstore knows \(\d+\); upgrade plantstore\.\n$/)
})

test('a reader slower than the export still gets its failure line: the export exits (code 1) only once the line has gone out', async (t) => {
  // The pipe is full when the export fails (its reader is behind), so the failure line waits in
  // the export's memory; exiting then would drop it and leave what reads on a clean end.
  const dir = tempDir(t)
  const fifo = join(dir, 'out')
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
  // Our reading end, which the reader holds back: the export gets the writing end.
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
  t.after(() => closeSync(reader))
  const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK)
  const filler = Buffer.alloc(4096, '#')
  let filled = 0
  while (tryIo(() => writeSync(writer, filler)) !== undefined) filled += filler.length
  const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: join(dir, 'none.db') }, stdio: ['ignore', writer, 'pipe'] })
  closeSync(writer) // the export's copy is the pipe's only writer now: the pipe ends once it exits
  const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
  const childStderr = child.stderr
  assert.ok(childStderr !== null)
  const stderr = await new Promise<string>(resolve => {
    let text = ''
    childStderr.setEncoding('utf8').on('data', (chunk: string) => { if ((text += chunk).endsWith('\n')) resolve(text) })
    exited.then(() => resolve(text), () => {})
  })
  assert.match(stderr, /^plantstore: There is no store at .*none\.db\.\n$/)

  // Only now does the reader catch up, to the pipe's end.
  const output = await readToEnd(reader)
  assert.equal(output.length - filled, EXPORT_FAILED.length + 1, 'the failure line, after the backlog')
  assert.equal(output.subarray(filled).toString(), `${EXPORT_FAILED}\n`)
  assert.equal(await exited, 1)
})

test('a reader that never reads does not hold a failed export for ever: it exits, code 1, within 10 s', async (t) => {
  const dir = tempDir(t)
  const fifo = join(dir, 'out')
  assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
  const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK) // held, never read
  t.after(() => closeSync(reader))
  const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK)
  const filler = Buffer.alloc(4096, '#')
  while (tryIo(() => writeSync(writer, filler)) !== undefined);
  const started = Date.now()
  const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: join(dir, 'none.db') }, stdio: ['ignore', writer, 'ignore'] })
  closeSync(writer)
  const code = await new Promise<number | null>(resolve => child.once('exit', resolve))
  assert.equal(code, 1)
  const took = Date.now() - started
  assert.ok(took >= 9000 && took < 15_000, `exited after ${took} ms`)
})

test('postgres: export from a database that holds no store refuses it, creating nothing; export | import --replace leaves the target as it was', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url, schema } = await pgSchema(t)
  const target = sqliteStoreWith(tempDir(t), [{ id: 1n, name: 'Fern' }])
  const exported = run(['export'], url)
  assert.equal(exported.status, 1)
  assert.equal(exported.stderr, 'plantstore: There is no store in the PostgreSQL database in DATABASE_URL (its search_path holds no plantstore tables).\n')
  assert.equal(exported.stdout.toString(), `${EXPORT_FAILED}\n`)
  assert.deepEqual((await adminQuery(`SELECT table_name FROM information_schema.tables WHERE table_schema = '${schema}'`)).rows, [], 'nothing created')
  const imported = run(['import', '--replace'], target, exported.stdout)
  assert.equal(imported.status, 1)
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: target }), [{ id: 1n, name: 'Fern' }])
  // A store there, even an empty one, is exported: nothing, and a success.
  assert.equal(run(['migrate'], url).status, 0)
  const empty = run(['export'], url)
  assert.deepEqual([empty.status, empty.stdout.toString(), empty.stderr], [0, '', 'Exported 0 plants.\n'])
})

test('export only reads a SQLite store: a backup (rollback journal) is left byte for byte as it was, its mode too, with no -wal or -shm beside it', (t) => {
  const dir = tempDir(t)
  const source = sqliteStoreWith(dir, [{ id: 1n, name: 'Fern' }, { id: 2n, name: 'Moss', tag: 'green' }])
  mkdirSync(join(dir, 'backup'))
  const backup = join(dir, 'backup', 'copy.db')
  const backedUp = run(['backup', backup], source)
  assert.equal(backedUp.status, 0, backedUp.stderr)
  const before = { bytes: readFileSync(backup), mode: statSync(backup).mode, files: readdirSync(join(dir, 'backup')) }
  assert.equal(before.bytes[18], 1, 'a rollback-journal file, as backup writes it')
  assert.deepEqual(parseExport(exportOf(backup, 2)), [{ id: 1n, name: 'Fern' }, { id: 2n, name: 'Moss', tag: 'green' }])
  assert.ok(readFileSync(backup).equals(before.bytes), 'not a byte changed (its journal mode neither)')
  assert.equal(statSync(backup).mode, before.mode)
  assert.deepEqual(readdirSync(join(dir, 'backup')), before.files)
})

test('plantstore export | head -1: the export stops quietly with exit code 0 once the reader has gone', async (t) => {
  const path = sqliteStoreWith(tempDir(t), Array.from({ length: 20_000 }, (_, i) => ({ id: BigInt(i), name: `plant ${i}` })))
  const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: path }, stdio: ['ignore', 'pipe', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
  const [first] = await new Promise<[Buffer]>(resolve => child.stdout.once('data', (chunk: Buffer) => resolve([chunk])))
  assert.match(first.toString(), /^\{"id":0,"name":"plant 0"\}\n/)
  child.stdout.destroy()
  assert.equal(await exited, 0)
  assert.equal(stderr, '')
})

test('export holds one page at a time: 300,000 plants go out within a 32 MiB heap, which holding them would overflow', (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'plantstore.db')
  numberedStore(path, 300_000, "CASE WHEN i % 3 > 0 THEN 'tag' || (i % 7) END")
  // An export that gathered its pages before writing them dies here (checked: it needs over 48 MiB).
  // 32, not less: Node 24 starts with more of its heap in use (at 24 MiB it died in 2 of 6 runs).
  // The output is gathered here, in this process: the child's heap holds only what it writes.
  const result = spawnSync(process.execPath, ['--max-old-space-size=32', MAIN, 'export'], { env: { ...process.env, DATABASE_URL: path }, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  assert.equal(result.status, 0, result.stderr.slice(-500))
  assert.equal(result.stderr, 'Exported 300000 plants.\n')
  const lines = result.stdout.split('\n')
  assert.equal(lines.length, 300001, 'every plant written, one a line')
  assert.deepEqual([lines[0], lines[299999]], ['{"id":1,"name":"plant number 1","tag":"tag1"}', '{"id":300000,"name":"plant number 300000"}'])
})

/**
 * POSTs plants 1, 2, 3… one after another (each once the last was answered) until `stop` is
 * set, so that at every moment the stored positive ids are 1..k; `acknowledged` counts the
 * answers.
 */
function keepWriting (server: Server): { acknowledged: () => number, stop: () => Promise<void> } {
  let acknowledged = 0
  const state = { stopped: false }
  const done = (async () => {
    while (!state.stopped) {
      const answer = await call(server, 'POST', '/plants', { body: { id: acknowledged + 1, name: `posted ${acknowledged + 1}` } })
      assert.equal(answer.status, 200, answer.text)
      acknowledged++
    }
  })()
  return { acknowledged: () => acknowledged, stop: async () => { state.stopped = true; await done } }
}

/**
 * An export while a server writes: the store holds plants -20,000..-1; the server receives
 * 1, 2, 3… The export's reader pauses after its first chunk for a second while the writes go
 * on, so an export that read each page in a snapshot of its own would see more of them.
 */
async function exportWhileWriting (t: TestContext, databaseUrl: string, server: Server): Promise<void> {
  const writer = keepWriting(server)
  while (writer.acknowledged() < 20) await sleep(5)
  const before = writer.acknowledged()
  const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: databaseUrl }, stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
  const chunks: Buffer[] = []
  let atFirstChunk = -1
  child.stdout.on('data', (chunk: Buffer) => {
    chunks.push(chunk)
    if (atFirstChunk !== -1) return
    atFirstChunk = writer.acknowledged()
    child.stdout.pause()
    setTimeout(() => child.stdout.resume(), 1000)
  })
  assert.equal(await exited, 0)
  await writer.stop()
  assert.ok(writer.acknowledged() > atFirstChunk + 10, `writes went on while the export ran (${atFirstChunk} → ${writer.acknowledged()})`)

  const ids = parseExport(Buffer.concat(chunks)).map(plant => plant.id)
  const negative = ids.filter(id => id < 0n)
  const posted = ids.filter(id => id > 0n).map(Number)
  assert.equal(negative.length, 20_000)
  assert.deepEqual(posted, Array.from({ length: posted.length }, (_, i) => i + 1), 'posted plants 1..k with no gap')
  assert.ok(posted.length >= before, `every plant acknowledged before the export began is in it (${posted.length} >= ${before})`)
  // Writes are sequential, so when the snapshot was taken (before the first chunk) at most one more was stored than answered.
  assert.ok(posted.length <= atFirstChunk + 1, `none written after the snapshot (${posted.length} <= ${atFirstChunk} + 1)`)
}

test('sqlite: an export while a server keeps writing is one snapshot: all plants stored before it, none stored after', async (t) => {
  const dir = tempDir(t)
  const path = sqliteStoreWith(dir, Array.from({ length: 20_000 }, (_, i) => ({ id: BigInt(-i - 1), name: `seeded ${i}` })))
  await exportWhileWriting(t, path, await startServer(t, { dir }))
})

test('postgres: an export while a server keeps writing is one snapshot: all plants stored before it, none stored after', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url, schema } = await pgSchema(t)
  const server = await startServer(t, { env: { DATABASE_URL: url } })
  await adminQuery(`INSERT INTO ${schema}.plants (id, name) SELECT -i, 'seeded ' || i FROM generate_series(1, 20000) AS i`)
  await exportWhileWriting(t, url, server)
})

/**
 * An import into the store a server serves, its input held open: while it runs, the server's
 * writes are answered 503 with the Error body within their deadline, and its reads go on; once
 * the input ends, the import commits and writes are answered again.
 */
async function importWhileServing (server: Server, databaseUrl: string, locked: () => Promise<boolean>): Promise<void> {
  const child = spawn(process.execPath, [MAIN, 'import'], { env: { ...process.env, DATABASE_URL: databaseUrl }, stdio: ['pipe', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
  child.stdin.write(Array.from({ length: 1500 }, (_, i) => `{"id":${i + 1},"name":"imported ${i + 1}"}\n`).join(''))
  const deadline = Date.now() + 20_000
  while (!await locked()) {
    assert.ok(Date.now() < deadline && child.exitCode === null, `the import did not take its lock: ${stderr}`)
    await sleep(20)
  }
  const started = Date.now()
  const write = await call(server, 'POST', '/plants', { body: { id: 1_000_000, name: 'meanwhile' } })
  assert.ok(isErrorBody(write, 503), write.text)
  // The deadline is 2 s (1.5 s on PostgreSQL); a second of slack for a busy machine.
  assert.ok(Date.now() - started < 3000, `answered within the deadline (${Date.now() - started} ms)`)
  const read = await call(server, 'GET', '/plants?limit=5')
  assert.equal(read.status, 200)
  assert.deepEqual(read.body, [], 'reads go on, and see nothing of the import yet')

  child.stdin.end('{"id":1501,"name":"last"}\n')
  assert.equal(await exited, 0, stderr)
  assert.match(stderr, /Imported 1501 plants\.\n$/)
  // Another id: the write answered 503 may have committed once the import let go (its outcome was unknown).
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1_000_001, name: 'after' } })).status, 200)
  assert.equal((await call(server, 'GET', '/plants/1501')).body.name, 'last')
}

test('sqlite: while an import runs, a server on the store answers writes 503 within the deadline and goes on reading', async (t) => {
  const server = await startServer(t)
  await importWhileServing(server, server.dbPath, async () => {
    const probe = openDatabase(server.dbPath)
    try {
      probe.exec('BEGIN IMMEDIATE')
      probe.exec('ROLLBACK')
      return false
    } catch (error) {
      if ((error as { code?: string }).code !== 'SQLITE_BUSY') throw error
      return true
    } finally {
      probe.close()
    }
  })
})

test('postgres: while an import runs, a server on the store answers writes 503 within the deadline and goes on reading', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url, schema } = await pgSchema(t)
  const server = await startServer(t, { env: { DATABASE_URL: url } })
  await importWhileServing(server, url, async () => (await adminQuery(
    "SELECT 1 FROM pg_locks WHERE relation = $1::regclass AND mode = 'ExclusiveLock' AND granted", [`${schema}.plants`])).rows.length === 1)
})

test('postgres: an export that fails part way ends with a line that makes an import of it fail; exit code 1 and one line', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const { url, schema } = await pgSchema(t, 'export_cut')
  assert.equal(run(['migrate'], url).status, 0)
  await adminQuery(`INSERT INTO ${schema}.plants (id, name) SELECT i, 'plant ' || i FROM generate_series(1, 20000) AS i`)
  const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: url }, stdio: ['ignore', 'pipe', 'pipe'] })
  const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const chunks: Buffer[] = []
  child.stdout.on('data', (chunk: Buffer) => chunks.push(chunk))
  // Once plants arrive, the reader pauses: the export waits with its snapshot open (idle in
  // transaction, as it is only between its statements otherwise). End its connection then.
  await new Promise(resolve => child.stdout.once('data', resolve))
  child.stdout.pause()
  const deadline = Date.now() + 10_000
  let ended = 0
  while (ended === 0 && Date.now() < deadline) {
    await sleep(50)
    ended = (await adminQuery("SELECT count(pg_terminate_backend(pid))::int AS n FROM pg_stat_activity WHERE application_name = 'export_cut' AND state = 'idle in transaction'")).rows[0].n
  }
  assert.equal(ended, 1)
  child.stdout.resume()
  assert.equal(await exited, 1)
  assert.match(stderr, /^plantstore: The store is unavailable: [^\n]+\n$/)
  const output = Buffer.concat(chunks).toString()
  assert.ok(output.endsWith(`\n${EXPORT_FAILED}\n`), output.slice(-200))
  const lines = output.split('\n').length - 1

  const target = join(tempDir(t), 'target.db')
  const result = run(['import'], target, output)
  assert.equal(result.status, 1)
  assert.match(result.stderr, new RegExp(`plantstore: Line ${lines} says that the export which wrote it failed there, so the plants after it are missing\\. Nothing was imported\\.\\n$`))
  assert.deepEqual(await plantsBySql({ store: 'sqlite', databaseUrl: target }), [])
})

test('postgres: an export from SQLite holding U+0000 does not go into PostgreSQL: one line names the line, nothing is imported', { skip: PG_URL === undefined ? PG_SKIP : false }, async (t) => {
  const path = sqliteStoreWith(tempDir(t), [{ id: 1n, name: 'fine' }, { id: 2n, name: 'nul \u0000 inside' }, { id: 3n, name: 'fine too' }])
  const exported = exportOf(path, 3)
  assert.ok(exported.includes('\\u0000'))
  const { url } = await pgSchema(t)
  const result = run(['import'], url, exported)
  assert.equal(result.status, 1)
  assert.equal(result.stderr, 'plantstore: there was no store in the PostgreSQL database in DATABASE_URL (its search_path held no plantstore tables), so a new, empty one was made there.\n' +
    'plantstore: Line 2: The name or tag holds the character U+0000, which this store cannot keep; remove it. Nothing was imported.\n')
  assert.deepEqual(await plantsBySql({ store: 'postgres', databaseUrl: url }), [])
})

test('an export stopped by SIGTERM or SIGINT part way ends with the failure line, so that an import of its output fails; exit 143 or 130', async (t) => {
  const dir = tempDir(t)
  const path = join(dir, 'plantstore.db')
  numberedStore(path, 20_000)
  for (const [signal, code] of [['SIGTERM', 143], ['SIGINT', 130]] as const) {
    // Only its first chunk is read before it is stopped: the pipe fills again and the export waits part way.
    const fifo = join(dir, `out-${signal}`)
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0)
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
    t.after(() => closeSync(reader))
    const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK)
    const child = spawn(process.execPath, [MAIN, 'export'], { env: { ...process.env, DATABASE_URL: path }, stdio: ['ignore', writer, 'pipe'] })
    closeSync(writer)
    const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
    let stderr = ''
    child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    // Stopped once it writes (its watch for signals is on by then), however slowly a loaded machine starts it.
    const first = await firstBytes(reader, () => stderr)
    child.kill(signal)
    const output = Buffer.concat([first, await readToEnd(reader)])
    assert.equal(await exited, code, stderr)
    assert.equal(stderr, `plantstore: stopped by ${signal}.\n`)
    const lines = output.toString('utf8').split('\n')
    assert.equal(lines.pop(), '', 'whole lines')
    assert.equal(lines.pop(), EXPORT_FAILED, 'the failure line last')
    assert.ok(lines.length < 20_000, `stopped part way (${lines.length} lines)`)
    assert.doesNotThrow(() => lines.forEach(line => parseJson(line)), 'each line above it a plant')
    const target = join(dir, `${signal}.db`)
    const imported = run(['import'], target, output)
    assert.equal(imported.status, 1, imported.stderr)
    assert.match(imported.stderr, /the export which wrote it failed there.*Nothing was imported/)
  }
})
