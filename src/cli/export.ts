import { once } from 'node:events'
import { exportFrom } from '../store/open.js'
import { parseCommand } from './args.js'
import { databaseUrlOf } from './database.js'
import { watchForStop } from './exit.js'
import { countOf, EXPORT_FAILED, lineOf } from './plant-lines.js'
import { USAGE } from './usage.js'

/** `plantstore export`: every plant as NDJSON on stdout, from one snapshot, a page at a time. */
export async function exportPlants (args: string[]): Promise<void> {
  const parsed = parseCommand('export', args, { 'database-url': { type: 'string' } })
  if (parsed === undefined) {
    process.stdout.write(USAGE.export + '\n')
    return
  }
  let plants = 0
  // Stopped part way (Ctrl-C, `timeout`), the output ends as a failed one does: not a smaller whole.
  const failed = (): void => { process.stdout.write(EXPORT_FAILED + '\n') }
  const watch = watchForStop(failed)
  try {
    for await (const page of exportFrom(databaseUrlOf(parsed.values['database-url'] as string | undefined))) {
      if (watch.stopped) return
      // Waiting for a slow reader keeps one page in memory, whatever the store holds.
      if (!process.stdout.write(page.map(lineOf).join(''))) await once(process.stdout, 'drain')
      plants += page.length
    }
  } catch (error) {
    if (watch.stopped) return
    // Even before the first plant: `export | import` must then fail, not import nothing.
    failed()
    throw error
  } finally {
    watch.end()
  }
  if (!watch.stopped) process.stderr.write(`Exported ${countOf(plants)}.\n`)
}
