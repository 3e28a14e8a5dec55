// `plantstore/client` as a consumer gets it: the package as `npm pack` makes it (so only the files
// package.json's "files" ships), unpacked in node_modules, imported by plain Node, type-checked by
// tsc, bundled for a browser.
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { after, before, test, type TestContext } from 'node:test'
import { pathToFileURL } from 'node:url'
import { promisify } from 'node:util'
import { build } from 'esbuild'
import { ROOT, startServer, tempDir } from '../helpers.js'

const run = promisify(execFile)

// Packed once for the file, from the build `npm test` made first (hence --ignore-scripts).
const packDir = mkdtempSync(join(tmpdir(), 'plantstore-pack-'))
let packed = ''
before(async () => {
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', packDir], { cwd: ROOT, timeout: 60_000 })
  const [{ filename }] = JSON.parse(stdout) as Array<{ filename: string }>
  await run('tar', ['-xzf', join(packDir, filename), '-C', packDir])
  packed = join(packDir, 'package')
})
after(() => rmSync(packDir, { recursive: true, force: true }))

/** A consumer's directory, with the packed package in its node_modules and `files` written in it. */
function consumer (t: TestContext, files: Record<string, string>): string {
  const dir = tempDir(t)
  mkdirSync(join(dir, 'node_modules'))
  symlinkSync(packed, join(dir, 'node_modules', 'plantstore'), 'dir')
  for (const [name, text] of Object.entries({ 'package.json': '{ "type": "module" }', ...files })) writeFileSync(join(dir, name), text)
  return dir
}

// Creates the largest int64 id and reads it back: exact only if both ways keep it.
const USE = `
const [baseUrl, token] = process.argv.slice(2)
const client = createClient({ baseUrl, token })
await client.createPlant({ id: 9223372036854775807n, name: 'Fern' })
const plant = await client.getPlant(9223372036854775807n)
console.log(typeof plant.id, String(plant.id))
`

test('plain Node imports plantstore/client from node_modules and keeps the id exact', async (t) => {
  const server = await startServer(t)
  const dir = consumer(t, { 'main.js': `import { createClient } from 'plantstore/client'\n${USE}` })
  const { stdout } = await run(process.execPath, ['main.js', server.url, server.token], { cwd: dir, timeout: 10_000 })
  assert.equal(stdout, 'bigint 9223372036854775807\n')
})

test('the package ships what the service and the client load, and no tests, sources or build state', async () => {
  const { stdout } = await run('npm', ['pack', '--ignore-scripts', '--dry-run', '--json'], { cwd: ROOT, timeout: 60_000 })
  const [{ files }] = JSON.parse(stdout) as Array<{ files: Array<{ path: string }> }>
  const paths = files.map(file => file.path)
  for (const needed of ['package.json', 'README.md', 'dist/cli/main.js', 'dist/client/index.js', 'dist/client/index.d.ts', 'openapi/plantstore.json', 'dist/store/migrations/postgres/003-create-rate-windows.sql']) {
    assert.ok(paths.includes(needed), `${needed} is in the package`)
  }
  assert.deepEqual(paths.filter(path => /^(test|src|scripts)\//.test(path)), [])
  assert.deepEqual(paths.filter(path => path.includes('tsbuildinfo')), [], 'tsc\'s incremental build info stays home')
})

test('tsc type-checks a consumer against the published declarations, with node16 and bundler resolution', async (t) => {
  const dir = consumer(t, {
    'main.ts': `import { createClient, PlantstoreError, type PlantRecord } from 'plantstore/client'
const client = createClient({ baseUrl: 'http://127.0.0.1:8080', token: 'pst_x' })
const plant: PlantRecord = await client.getPlant(1n)
const id: bigint = plant.id
// @ts-expect-error ids are bigints: a number may have lost digits already
await client.getPlant(1)
for await (const { name } of client.plants({ tag: 'fern', limit: 10, after: id })) console.log(name)
try { await client.deletePlant(id) } catch (error) { if (error instanceof PlantstoreError) console.log(error.status, error.body?.message, error.retryAfter) }
`
  })
  const tsc = join(ROOT, 'node_modules/typescript/bin/tsc')
  for (const resolution of [['--module', 'node16'], ['--module', 'preserve', '--moduleResolution', 'bundler']]) {
    const checked = await run(process.execPath, [tsc, '--noEmit', '--strict', '--target', 'es2022', ...resolution, 'main.ts'], { cwd: dir, timeout: 60_000 })
      // Any failure is non-empty: tsc's findings, or a timeout, a crash, or output on stderr only.
      .then(() => '', (error: { code?: unknown, signal?: unknown, stdout: string, stderr: string }) => `exit ${String(error.code)} ${String(error.signal)}: ${error.stdout}${error.stderr}`)
    assert.equal(checked, '', resolution.join(' '))
  }
})

test('a browser bundle of plantstore/client has no node: import and works over fetch', async (t) => {
  const server = await startServer(t)
  const dir = consumer(t, { 'entry.js': "export { createClient } from 'plantstore/client'\n" })
  const result = await build({ entryPoints: [join(dir, 'entry.js')], absWorkingDir: ROOT, bundle: true, platform: 'browser', format: 'esm', write: false, metafile: true, logLevel: 'silent' })
  assert.deepEqual(Object.keys(result.metafile.inputs).sort(), [join(dir, 'entry.js'), join(packed, 'dist/client/index.js'), join(packed, 'dist/json.js')].map(file => relative(ROOT, file)).sort())
  const code = result.outputFiles[0].text
  assert.doesNotMatch(code, /\bnode:|\brequire\(|\bprocess\.|\bBuffer\b/)

  writeFileSync(join(dir, 'bundle.js'), code)
  const { createClient } = await import(pathToFileURL(join(dir, 'bundle.js')).href)
  const client = createClient({ baseUrl: server.url, token: server.token })
  await client.createPlant({ id: 2n ** 53n + 1n, name: 'Fern' })
  assert.deepEqual(await client.getPlant(2n ** 53n + 1n), { id: 2n ** 53n + 1n, name: 'Fern' })
})
