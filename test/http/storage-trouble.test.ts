import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { test } from 'node:test'
import { call, isErrorBody, startServer } from '../helpers.js'

/** Mounts a small tmpfs on a new directory; false where mounting is not permitted. */
function mountSmallDisk (dir: string, size: string): boolean {
  mkdirSync(dir)
  return spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]).status === 0
}

const canMount = process.getuid?.() === 0 ? false : 'mounting a small tmpfs needs root'

test('a full disk answers writes 503 with Retry-After, never 500; reads go on, and nothing answered 200 is lost', { skip: canMount }, async (t) => {
  const parent = mkdtempSync(join(tmpdir(), 'plantstore-disk-'))
  const disk = join(parent, 'disk')
  if (!mountSmallDisk(disk, '300k')) return t.skip('mount was refused here')
  const server = await startServer(t, { dir: disk })
  // Hooks run in the order they were added: the server is killed first, then the disk goes.
  t.after(() => {
    spawnSync('umount', ['-l', disk])
    rmSync(parent, { recursive: true, force: true })
  })
  const stored: number[] = []
  let full: Awaited<ReturnType<typeof call>> | undefined
  for (let id = 1; id <= 1000 && full === undefined; id++) {
    const answer = await call(server, 'POST', '/plants', { body: { id, name: 'n'.repeat(200), tag: 't'.repeat(100) } })
    if (answer.status === 200) stored.push(id)
    else full = answer
  }
  assert.ok(full !== undefined, 'the disk filled up')
  assert.ok(isErrorBody(full, 503), `${full.status} ${full.text}`)
  assert.equal(full.headers.get('retry-after'), '1')
  assert.doesNotMatch(full.text, /SQLITE|disk|full|\//i, 'no internals in the answer')
  assert.ok(stored.length > 0)
  for (const id of stored) assert.equal((await call(server, 'GET', `/plants/${id}`)).status, 200, `plant ${id} answered 200 and must be readable`)
})

test('the data directory removed under a running server: writes answer 503, never 200 (they would go with the files), /readyz 503; reads go on', async (t) => {
  const parent = mkdtempSync(join(tmpdir(), 'plantstore-gone-'))
  t.after(() => rmSync(parent, { recursive: true, force: true }))
  const server = await startServer(t, { dir: join(parent, 'data') })
  assert.equal((await call(server, 'POST', '/plants', { body: { id: 1, name: 'Fern' } })).status, 200)
  rmSync(join(parent, 'data'), { recursive: true })
  // At once, as a busy client would: every one of them is checked, not only the first.
  const answers = await Promise.all([2, 3, 4, 5, 6].map(async id => await call(server, 'POST', '/plants', { body: { id, name: 'Gone' } })))
  for (const answer of answers) {
    assert.ok(isErrorBody(answer, 503), `${answer.status} ${answer.text}`)
    assert.ok(answer.headers.get('retry-after') !== null)
  }
  assert.ok(isErrorBody(await call(server, 'GET', '/readyz', { token: null }), 503))
  assert.equal((await call(server, 'GET', '/plants/1')).status, 200, 'what it holds is still read')
  assert.match(server.stdout(), /plantstore\.db was removed while the service ran/)
})
