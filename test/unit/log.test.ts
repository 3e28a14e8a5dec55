import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { resolve } from 'node:path'
import { test } from 'node:test'
import { pathToFileURL } from 'node:url'

const LOG = pathToFileURL(resolve(import.meta.dirname, '../../src/log.ts')).href

/** Runs `body` in a process whose pino logger writes through logDestination(); its stdout and exit code. */
function run (body: string): { lines: Array<Record<string, unknown>>, status: number | null, stderr: string } {
  const script = `import pino from 'pino'; import { logDestination } from ${JSON.stringify(LOG)}
const log = pino({ level: 'info' }, logDestination()); ${body}`
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: resolve(import.meta.dirname, '../..'), encoding: 'utf8' })
  return { lines: child.stdout.trim().split('\n').filter(line => line !== '').map(line => JSON.parse(line)), status: child.status, stderr: child.stderr }
}

test('the lines of one turn go out whole and in order, also when the process exits in that same turn', () => {
  // 2,000 lines of ~120 bytes: past the 16 KiB a write takes, so batches are handed over mid-turn too.
  const { lines, status, stderr } = run("for (let i = 0; i < 2000; i++) log.info({ i }, 'line'); process.exit(3)")
  assert.equal(status, 3, stderr)
  assert.deepEqual(lines.map(line => line.i), Array.from({ length: 2000 }, (_, i) => i))
})

test('lines logged across turns all arrive, and a thrown error does not lose the last ones', () => {
  const { lines, status, stderr } = run("log.info('first'); setTimeout(() => { log.info('second'); log.info('last'); throw new Error('boom') }, 20)")
  assert.equal(status, 1)
  assert.match(stderr, /boom/)
  assert.deepEqual(lines.map(line => line.msg), ['first', 'second', 'last'])
})
