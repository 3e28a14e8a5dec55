// Preloaded with --import by a test: holds the load of dist/server.js for 5 s, having first made
// the file SLOW_LOAD_MARK names, so that the test can signal a server while its modules load.
import { register } from 'node:module'

register('data:text/javascript,' + encodeURIComponent(`
import { writeFileSync } from 'node:fs'
export async function load (url, context, next) {
  if (url.endsWith('/dist/server.js')) {
    writeFileSync(${JSON.stringify(process.env.SLOW_LOAD_MARK ?? '')}, '')
    await new Promise(resolve => setTimeout(resolve, 5000))
  }
  return next(url, context)
}`))
