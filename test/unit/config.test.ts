import assert from 'node:assert/strict'
import { test } from 'node:test'
import { ConfigError, loadConfig } from '../../src/config.js'

test('defaults follow the SPEC', () => {
  assert.deepEqual(loadConfig({}), { port: 8080, host: '127.0.0.1', databaseUrl: './data/plantstore.db', logLevel: 'info', rateLimitPerMinute: 60000, requestTimeout: 10, shutdownTimeout: 10, workers: 1, corsOrigins: [], changesRetentionMs: 7 * 86_400_000, changesMaxReaders: 1000, webhooksAllowPrivate: false, webhooksMaxInFlight: 64, webhooksTimeout: 15 })
})

test('flags override the environment', () => {
  assert.equal(loadConfig({ PORT: '1000' }, { port: '2000' }).port, 2000)
})

test('bad values fail with a sentence naming the setting', () => {
  for (const [env, name] of [[{ PORT: 'eighty' }, 'PORT'], [{ PORT: '70000' }, 'PORT'], [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'], [{ RATE_LIMIT_PER_MINUTE: '-1' }, 'RATE_LIMIT_PER_MINUTE'], [{ DATABASE_URL: '' }, 'DATABASE_URL'], [{ REQUEST_TIMEOUT: '0' }, 'REQUEST_TIMEOUT'], [{ SHUTDOWN_TIMEOUT: '1.5' }, 'SHUTDOWN_TIMEOUT'], [{ WORKERS: '0' }, 'WORKERS'], [{ WORKERS: '65' }, 'WORKERS'], [{ WORKERS: '2.0' }, 'WORKERS'], [{ CHANGES_RETENTION: '7' }, 'CHANGES_RETENTION'], [{ CHANGES_RETENTION: '0d' }, 'CHANGES_RETENTION'], [{ CHANGES_RETENTION: '3654d' }, 'CHANGES_RETENTION'], [{ CHANGES_MAX_READERS: '-1' }, 'CHANGES_MAX_READERS'], [{ WEBHOOKS_ALLOW_PRIVATE: 'yes' }, 'WEBHOOKS_ALLOW_PRIVATE'], [{ WEBHOOKS_MAX_IN_FLIGHT: '0' }, 'WEBHOOKS_MAX_IN_FLIGHT'], [{ WEBHOOKS_TIMEOUT: '0' }, 'WEBHOOKS_TIMEOUT']] as const) {
    assert.throws(() => loadConfig(env), (error: Error) => error instanceof ConfigError && error.message.startsWith(`${name} must be`), JSON.stringify(env))
  }
})

test('DATABASE_URL: a URL of a scheme other than postgres(ql):// is refused, naming the scheme and not the rest; a path that only looks so is written ./', () => {
  for (const url of ['mysql://app:secret@db/plants', 'postgress://db/plants', 'POSTGRES://db/plants', 'postgres:/app:secret@db/plants', 'postgres:app:secret@db/plants', 'sqlite:///tmp/plants.db', 'sqlite:plants.db', 'file:/tmp/plants.db', 'file:plants.db', 'file:./db/plants.db']) {
    const scheme = url.slice(0, url.indexOf(':'))
    assert.throws(() => loadConfig({ DATABASE_URL: url }), (error: Error) =>
      error.message.startsWith(`DATABASE_URL begins as a ${scheme}: URL, but only postgres:// and postgresql:// (in lower case) select a database server`) && !error.message.includes('secret') && !error.message.includes('db/plants'))
  }
  for (const url of ['postgres://db/plants', 'postgresql://db/plants', './mysql://x.db', './file:plants.db', 'data/plants.db', 'C:plants.db', 'data/a:b.db', 'data:2024.db', 'C:/plants.db', 'plants-2024-06-01T12:00.db']) assert.equal(loadConfig({ DATABASE_URL: url }).databaseUrl, url)
})

test('DATABASE_URL=:memory: (SQLite\'s database in memory, which keeps nothing) is refused in one line; ./:memory: is a file', () => {
  assert.throws(() => loadConfig({ DATABASE_URL: ':memory:' }), (error: Error) => error instanceof ConfigError && /^DATABASE_URL must be a postgres:\/\/ URL or a SQLite file path; ":memory:" is SQLite's name for a database in memory/.test(error.message))
  assert.equal(loadConfig({ DATABASE_URL: './:memory:' }).databaseUrl, './:memory:')
})

test('DATABASE_URL with white space at either end is refused in one line, whatever follows (" :memory:", " x.db")', () => {
  for (const url of [' :memory:', ':memory: ', '\tx.db', ' x.db', 'postgres://db/plants ']) {
    assert.throws(() => loadConfig({ DATABASE_URL: url }), (error: Error) => error instanceof ConfigError && error.message.startsWith('DATABASE_URL begins or ends with white space'), JSON.stringify(url))
  }
  assert.equal(loadConfig({ DATABASE_URL: './ x.db' }).databaseUrl, './ x.db')
})

test('several workers need PostgreSQL: on a SQLite file the start is refused, saying why', () => {
  assert.throws(() => loadConfig({ WORKERS: '2' }), (error: Error) => error instanceof ConfigError &&
    /^WORKERS is 2, but a SQLite store has one writer: run one process \(WORKERS=1\), or use PostgreSQL/.test(error.message))
  assert.equal(loadConfig({ WORKERS: '1' }).workers, 1)
  assert.equal(loadConfig({ DATABASE_URL: 'postgres://db/plants' }, { workers: '64' }).workers, 64)
})

test('CORS_ORIGINS takes exact origins separated by commas, as browsers send them', () => {
  assert.deepEqual(loadConfig({ CORS_ORIGINS: 'http://garden.example:3000' }).corsOrigins, ['http://garden.example:3000'])
  assert.deepEqual(loadConfig({ CORS_ORIGINS: 'https://garden.example, http://localhost:5173,http://[::1]:8080' }).corsOrigins,
    ['https://garden.example', 'http://localhost:5173', 'http://[::1]:8080'])
  assert.deepEqual(loadConfig({}, { corsOrigins: 'https://shop.example' }).corsOrigins, ['https://shop.example'])
})

test('CORS_ORIGINS refuses what a browser never sends as an Origin, naming the value', () => {
  const refused: Array<[string, string]> = ['*', 'null', 'garden.example', 'https://garden.example/', 'https://garden.example/app', 'https://garden.example?x=1',
    'HTTPS://garden.example', 'https://Garden.example', 'http://garden.example:80', 'https://garden.example:443', 'ftp://garden.example',
    'https://user@garden.example'].map(value => [value, value])
  // An empty element is named as such: the sentence ends with not "".
  refused.push(['https://garden.example,', ''], [',https://garden.example', ''], ['https://a.example,,https://b.example', ''], ['https://a.example,https://b.example/', 'https://b.example/'])
  for (const [value, offending] of refused) {
    assert.throws(() => loadConfig({ CORS_ORIGINS: value }), (error: Error) => error instanceof ConfigError && error.message.startsWith('CORS_ORIGINS must be') &&
      error.message.endsWith(`not "${offending}".`), value)
  }
})

test('DATABASE_URL with a control character in it is refused, in one line that does not repeat it (it may hold a password)', () => {
  for (const value of ['80\nFAKE: injected', './x\ty.db', 'postgres://u:p@h\r/d', 'a\u2028b.db', 'a\u0085b.db']) {
    assert.throws(() => loadConfig({ DATABASE_URL: value }), (error: Error) => error instanceof ConfigError && error.message === 'DATABASE_URL holds a control character (a line break, a tab); remove it.', JSON.stringify(value))
  }
})

test('a refused value is quoted as JSON in its message, so that a line break or a tab in it cannot split the one line', () => {
  for (const [name, value] of [['PORT', '1\n2'], ['LOG_LEVEL', 'info\nwarn'], ['HOST', 'a\tb'], ['CHANGES_RETENTION', '7d\r\n'], ['WEBHOOKS_ALLOW_PRIVATE', 'true\n'], ['CORS_ORIGINS', 'https://a.example\nhttps://b.example']]) {
    assert.throws(() => loadConfig({ [name]: value }), (error: Error) => {
      assert.ok(error instanceof ConfigError)
      assert.doesNotMatch(error.message, /[\n\r\t]/, error.message)
      assert.ok(error.message.includes(JSON.stringify(value.trim())) || error.message.includes(JSON.stringify(value)), error.message)
      return true
    }, name)
  }
})
