import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { call, cli, ROOT, startServer, tempDir } from '../helpers.js'

const COMMANDS = [['serve'], ['migrate'], ['tokens'], ['tokens', 'create'], ['tokens', 'list'], ['tokens', 'revoke'], ['backup'], ['export'], ['import']]

test('--help on every command and subcommand prints its usage on stdout and exits 0, touching no store', (t) => {
  const dir = tempDir(t)
  for (const command of [[], ...COMMANDS]) {
    for (const flag of ['--help', '-h']) {
      const result = cli(dir, [...command, flag])
      const name = ['plantstore', ...command].join(' ')
      assert.equal(result.status, 0, `${name} ${flag}: ${result.stderr}`)
      assert.equal(result.stderr, '', name)
      assert.match(result.stdout, new RegExp(`^Usage: ${name} `), name)
    }
  }
  assert.throws(() => readFileSync(join(dir, 'plantstore.db')), /ENOENT/)
})

test('plantstore --version prints the version in package.json', (t) => {
  const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'))
  const result = cli(tempDir(t), ['--version'])
  assert.equal(result.status, 0)
  assert.equal(result.stdout, `${version}\n`)
  const extra = cli(tempDir(t), ['--version', 'extra'])
  assert.deepEqual([extra.status, extra.stdout, extra.stderr], [1, '', 'plantstore: --version: unexpected argument "extra"; see plantstore --help.\n'])
})

test('commands other than serve start without the HTTP stack: neither Fastify nor prom-client is loaded, nor, on SQLite, the PostgreSQL client; the token commands, migrate and backup load no Ajv', (t) => {
  const dir = tempDir(t)
  assert.equal(cli(dir, ['tokens', 'create', '--name', 'loads']).status, 0)
  const commands = [['--version'], ['--help'], ['migrate'], ['tokens', 'create', '--name', 'other'], ['tokens', 'list'], ['tokens', 'revoke', 'other'],
    ['backup', join(dir, 'copy.db')], ['export'], ['import', '--replace']] // import reads an empty stdin: no plants
  for (const command of commands) {
    // NODE_DEBUG=module names each CommonJS module Node looks for; both libraries are CommonJS.
    const result = cli(dir, command, { NODE_DEBUG: 'module' })
    assert.equal(result.status, 0, `${command.join(' ')}: ${result.stderr.slice(-500)}`)
    // --version and --help load no store either; the rest load the SQLite binding, which the trace names.
    if (!command[0].startsWith('--')) assert.match(result.stderr, /node_modules\/better-sqlite3(-napi)?\//, 'the trace names the modules loaded (the SQLite binding)')
    else assert.doesNotMatch(result.stderr, /node_modules\/(better-sqlite3|pg)\//, command.join(' '))
    assert.doesNotMatch(result.stderr, /node_modules\/(fastify|prom-client|pg)\//, command.join(' '))
    // The commands that read or write no plant lines (import validates each against NewPlant) load no Ajv either.
    if (['tokens', 'migrate', 'backup'].includes(command[0])) assert.doesNotMatch(result.stderr, /node_modules\/ajv\//, command.join(' '))
    if (command[0] === 'import') assert.match(result.stderr, /node_modules\/ajv\//)
  }
})

test('a server on SQLite does not load the PostgreSQL client', async (t) => {
  const server = await startServer(t, { env: { NODE_DEBUG: 'module' } })
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
  assert.match(server.stderr(), /node_modules\/fastify\//, 'the trace names the modules loaded (Fastify)')
  assert.doesNotMatch(server.stderr(), /node_modules\/pg\//)
})

test('an unknown flag, or one given twice, is one line on stderr, naming it, and exit 1', (t) => {
  const dir = tempDir(t)
  for (const command of [[], ...COMMANDS.filter(c => c.join() !== 'tokens')]) {
    const result = cli(dir, [...command, '--bogus'])
    const name = command.join(' ')
    assert.equal(result.status, 1, name)
    assert.equal(result.stdout, '', name)
    assert.match(result.stderr, /^plantstore: .*unknown option "--bogus"; see plantstore .*--help\.\n$/, name)
  }
  // A flag that takes one value, given twice, is not quietly the last one; --scope takes several.
  for (const args of [['tokens', 'create', '--name', 'a', '--name', 'b'], ['tokens', 'create', '--name=a', '--name', 'b'], ['import', '--replace', '--replace'], ['export', '--database-url', join(dir, 'a.db'), '--database-url', join(dir, 'b.db')]]) {
    const result = cli(dir, args)
    assert.equal(result.status, 1, args.join(' '))
    assert.match(result.stderr, /^plantstore: .*option "--(name|replace|database-url)" given twice; see plantstore .*--help\.\n$/, args.join(' '))
  }
  assert.throws(() => readFileSync(join(dir, 'plantstore.db')), /ENOENT/, 'nothing was made')
  const scopes = cli(dir, ['tokens', 'create', '--name', 'two', '--scope', 'plants:read', '--scope', 'plants:write'])
  assert.equal(scopes.status, 0, scopes.stderr)
  const unknown = cli(dir, ['tokens', 'frobnicate'])
  assert.equal(unknown.status, 1)
  assert.match(unknown.stderr, /^plantstore: Unknown tokens command "frobnicate"; .*\n$/)
})

test('serve is the default command with its flags too: plantstore --port X is plantstore serve --port X', (t) => {
  const dir = tempDir(t)
  for (const args of [['--port', 'abc'], ['serve', '--port', 'abc']]) {
    const result = cli(dir, args)
    assert.equal(result.status, 1, args.join(' '))
    assert.match(result.stderr, /^plantstore: [^\n]*PORT[^\n]*"abc"[^\n]*\n$/, `${args.join(' ')}: the setting's own message, ${result.stderr}`)
  }
})

test('a flag without its value says so, and how to write a value that starts with a dash', (t) => {
  const dir = tempDir(t)
  for (const [args, flag] of [[['serve', '--port'], '--port'], [['serve', '--port', '--host', 'x'], '--port'], [['tokens', 'create', '--name', 'a', '--expires-in', '-1d'], '--expires-in']] as const) {
    const result = cli(dir, [...args])
    assert.equal(result.status, 1, args.join(' '))
    assert.equal(result.stdout, '')
    assert.match(result.stderr, new RegExp(`^plantstore: [a-z ]+: option "${flag}" needs a value \\(one that starts with a dash is written ${flag}=-…\\); see plantstore [a-z ]+ --help\\.\\n$`), `${args.join(' ')}: ${result.stderr}`)
  }
})
