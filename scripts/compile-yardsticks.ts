// The yardsticks as plain JavaScript, as the service runs: under tsx, with its module loader, a
// yardstick profiled slower than it is (docs/performance.md). Shared by the bench, the stage
// profiler and the instruction count.
import { spawnSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'

/** Compiles scripts/yardsticks.ts and scripts/yardstick-fastify.ts of the checkout at `root` into `dir` (ES modules), with its own tsc. */
export function compileYardsticks (root: string, dir: string): void {
  const tsc = join(root, 'node_modules/.bin/tsc')
  const args = ['--ignoreConfig', '--outDir', dir, '--module', 'nodenext', '--moduleResolution', 'nodenext', '--target', 'es2022', '--types', 'node', '--skipLibCheck', '--strict', 'scripts/yardsticks.ts', 'scripts/yardstick-fastify.ts']
  const run = spawnSync(tsc, args, { cwd: root, encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`compiling the yardsticks failed:\n${run.stdout}${run.stderr}`)
  writeFileSync(join(dir, 'package.json'), '{"type":"module"}\n')
}
