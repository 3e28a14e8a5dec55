// package.json takes Node 20 and later: every package the lockfile installs on the Node in use
// must accept it, or an install with npm's engine-strict refuses the whole project.
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { copyFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'
import { ROOT, tempDir } from '../helpers.js'

test('an engine-strict install on this Node takes every locked package (optional ones it cannot use are skipped)', (t) => {
  const dir = tempDir(t)
  for (const file of ['package.json', 'package-lock.json']) copyFileSync(join(ROOT, file), join(dir, file))
  const install = spawnSync('npm', ['ci', '--dry-run', '--engine-strict', '--offline', '--ignore-scripts', '--no-audit', '--no-fund'], { cwd: dir, encoding: 'utf8' })
  assert.equal(install.status, 0, install.stderr)
  assert.doesNotMatch(install.stderr, /EBADENGINE/)
})
