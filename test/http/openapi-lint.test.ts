import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { promisify } from 'node:util'
import { call, ROOT, startServer } from '../helpers.js'

const DOCUMENT = 'openapi/plantstore.json'

// Both linters run on this machine only: no usage reports, no update checks, configuration local.
const offline = { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', SCARF_ANALYTICS: 'false' }

/** Runs a linter from node_modules/.bin; its JSON report is on stdout whatever its exit code. */
async function lint (bin: string, args: string[]): Promise<string> {
  try {
    return (await promisify(execFile)(join(ROOT, 'node_modules/.bin', bin), args, { cwd: ROOT, env: offline })).stdout
  } catch (error) {
    const { stdout, stderr } = error as { stdout?: string, stderr?: string }
    if (stdout === undefined || stdout.trim() === '') throw new Error(`${bin} failed:\n${stderr ?? ''}`)
    return stdout
  }
}

function where (problem: { path?: unknown[], location?: Array<{ pointer?: string }> }): string {
  return problem.location?.[0]?.pointer ?? (problem.path ?? []).join('.')
}

test('the linted file is the served document', async (t) => {
  const server = await startServer(t)
  const served = (await call(server, 'GET', '/openapi.json', { token: null })).body
  assert.deepEqual(served, JSON.parse(readFileSync(join(ROOT, DOCUMENT), 'utf8')))
})

test("the document passes Redocly's recommended rules with no error and no warning", async () => {
  const report = JSON.parse(await lint('redocly', ['lint', '--format=json', DOCUMENT]))
  const problems = (report.problems as Array<{ ruleId: string, message: string, ignored?: boolean, location?: Array<{ pointer?: string }> }>)
    .filter(problem => problem.ignored !== true)
    .map(problem => `${problem.ruleId} at ${where(problem)}: ${problem.message}`)
  assert.deepEqual(problems, [])
})

test("the document passes Spectral's spectral:oas with no error and no warning", async () => {
  const results = JSON.parse(await lint('spectral', ['lint', '--quiet', '--format=json', '--ruleset=.spectral.yaml', DOCUMENT]))
  const problems = (results as Array<{ code: string, message: string, path: unknown[] }>)
    .map(problem => `${problem.code} at ${where(problem)}: ${problem.message}`)
  assert.deepEqual(problems, [])
})
