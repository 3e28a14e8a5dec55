import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ConfigError, loadConfig } from '../../src/config.js'

test('defaults follow the SPEC', () => {
  assert.deepEqual(loadConfig({}), { port: 8080, host: '127.0.0.1', databaseUrl: './data/plantstore.db', logLevel: 'info', rateLimitPerMinute: 60000, requestTimeout: 10, shutdownTimeout: 10 })
})

test('flags override the environment', () => {
  assert.equal(loadConfig({ PORT: '1000' }, { port: '2000' }).port, 2000)
})

test('bad values fail with a sentence naming the setting', () => {
  for (const [env, name] of [[{ PORT: 'eighty' }, 'PORT'], [{ PORT: '70000' }, 'PORT'], [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'], [{ RATE_LIMIT_PER_MINUTE: '-1' }, 'RATE_LIMIT_PER_MINUTE'], [{ DATABASE_URL: '' }, 'DATABASE_URL'], [{ REQUEST_TIMEOUT: '0' }, 'REQUEST_TIMEOUT'], [{ SHUTDOWN_TIMEOUT: '1.5' }, 'SHUTDOWN_TIMEOUT']] as const) {
    assert.throws(() => loadConfig(env), (error: Error) => error instanceof ConfigError && error.message.startsWith(name))
  }
})
