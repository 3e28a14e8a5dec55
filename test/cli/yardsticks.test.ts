import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { join } from 'node:path'
import { test } from 'node:test'
import { setTimeout as sleep } from 'node:timers/promises'
import { accepting, freePort, ROOT, tempDir } from '../helpers.js'

// `npm run bench` measures the service against these, and they import the built service: a module
// they take from it, moved or renamed, would otherwise show only when someone benches.
for (const yardstick of ['fastify', 'node']) {
  test(`the bench's ${yardstick === 'node' ? 'node:http' : 'Fastify'} durable yardstick starts on the built service and creates a plant as the contract says`, async (t) => {
    const port = await freePort()
    const token = 'pst_yardstick'
    const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'scripts/yardstick-fastify.ts')], {
      cwd: ROOT,
      env: { ...process.env, PLANTSTORE_ROOT: ROOT, DATABASE_PATH: join(tempDir(t), 'yardstick.db'), YARDSTICK_TOKEN: token, YARDSTICK: yardstick, PORT: String(port), HOST: '127.0.0.1' },
      stdio: ['ignore', 'ignore', 'pipe']
    })
    let stderr = ''
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    const exited = new Promise<number | null>(resolve => child.once('exit', resolve))
    t.after(() => { if (child.exitCode === null) child.kill('SIGKILL') })
    for (const until = Date.now() + 15_000; !await accepting(port); await sleep(50)) {
      assert.ok(child.exitCode === null && Date.now() < until, `the yardstick did not start: ${stderr}`)
    }
    const post = async (body: string): Promise<Response> => await fetch(`http://127.0.0.1:${port}/plants`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body })
    const created = await post('{"id":9007199254740993,"name":"Fern","tag":"green"}')
    assert.equal(created.status, 200)
    assert.deepEqual(await created.json(), { name: 'Fern', tag: 'green' })
    assert.equal((await post('{"id":9007199254740993,"name":"Moss"}')).status, 409)
    child.kill('SIGTERM')
    assert.equal(await exited, 0, stderr)
  })
}
