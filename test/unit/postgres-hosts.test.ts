// DATABASE_URL's hosts, the way libpq takes them (SPEC section 10): one URL per host, in order,
// and the session the service asks of them.
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { parse } from 'pg-connection-string'
import { databaseHosts, hostOf } from '../../src/store/postgres-hosts.js'

test('several hosts: one URL each, in order, the rest of the URL kept as written (sslmode read as libpq does); read-write unless primary is asked for', () => {
  assert.deepEqual(databaseHosts('postgres://u:p%40ss@h1:5432,h2:5433/db?sslmode=disable&options=-c%20search_path%3Ds'), {
    urls: ['postgres://u:p%40ss@h1:5432/db?sslmode=disable&options=-c%20search_path%3Ds&uselibpqcompat=true', 'postgres://u:p%40ss@h2:5433/db?sslmode=disable&options=-c%20search_path%3Ds&uselibpqcompat=true'],
    target: 'read-write'
  })
  assert.deepEqual(databaseHosts('postgresql://[::1]:5432,[2001:db8::7],db.example/x?target_session_attrs=primary'), {
    urls: ['postgresql://[::1]:5432/x', 'postgresql://[2001:db8::7]/x', 'postgresql://db.example/x'],
    target: 'primary'
  })
  assert.equal(databaseHosts('postgres://a,b/db?target_session_attrs=any').target, 'read-write', 'any of several would take a standby that answers first (SPEC section 10: only the one that accepts writes)')
  assert.equal(databaseHosts('postgres://a/db?target_session_attrs=any').target, 'any')
  assert.deepEqual(databaseHosts('postgres://a,b/db?port=5433').urls, ['postgres://a/db?port=5433', 'postgres://b/db?port=5433'], 'one port= for every host, as libpq takes it')
  assert.deepEqual(databaseHosts('postgres://u:p@ss,w@h1,h2/db').urls, ['postgres://u:p@ss,w@h1/db', 'postgres://u:p@ss,w@h2/db'], 'a password holding "@" and ","')
})

test('one host is as before: the URL unchanged, any session', () => {
  for (const url of ['postgres://postgres@127.0.0.1:5432/test', 'postgres:///db?host=/var/run/postgresql', 'postgresql://localhost', 'postgres://u@a:1/db?host=b&port=2']) {
    assert.deepEqual(databaseHosts(url), { urls: [url], target: 'any' })
  }
  assert.deepEqual(databaseHosts('postgres://h/db?target_session_attrs=primary&x=1'), { urls: ['postgres://h/db?x=1'], target: 'primary' })
})

test('sslmode means what it means to libpq: require encrypts without checking the certificate, and node-postgres warns of nothing', async () => {
  const warnings: string[] = []
  const listen = (warning: Error): void => { warnings.push(warning.message) }
  const delivered = async (): Promise<void> => await new Promise(resolve => setImmediate(resolve)) // warnings arrive on a later tick
  process.on('warning', listen)
  try {
    const [url] = databaseHosts('postgres://u@h/db?sslmode=require').urls
    assert.equal(url, 'postgres://u@h/db?sslmode=require&uselibpqcompat=true')
    assert.equal((parse(url).ssl as { rejectUnauthorized?: boolean }).rejectUnauthorized, false)
    assert.deepEqual(databaseHosts('postgres://u@a,b/db?sslmode=verify-full').urls, ['postgres://u@a/db?sslmode=verify-full&uselibpqcompat=true', 'postgres://u@b/db?sslmode=verify-full&uselibpqcompat=true'])
    assert.equal(databaseHosts('postgres://u@h/db?sslmode=require&uselibpqcompat=false').urls[0], 'postgres://u@h/db?sslmode=require&uselibpqcompat=false', 'an explicit choice is kept')
    await delivered()
    assert.deepEqual(warnings, [])
    // The control: the URL as written, without the parameter, is the one node-postgres warns of (once a process).
    assert.equal((parse('postgres://u@h/db?sslmode=require').ssl as { rejectUnauthorized?: boolean }).rejectUnauthorized, undefined, 'verify-full: the certificate checked')
    await delivered()
    assert.equal(warnings.length, 1)
    assert.match(warnings[0], /SECURITY WARNING/)
  } finally {
    process.off('warning', listen)
  }
})

test('what the service cannot take is refused with a sentence, never the password', () => {
  for (const [url, message] of [
    ['postgres://u:secret@a,b/db?target_session_attrs=standby', /target_session_attrs is "standby".*primary, read-write, any/],
    ['postgres://u:secret@a,b/db?target_session_attrs=prefer-standby', /prefer-standby/],
    ['postgres://u:secret@a,,b/db', /hosts are not host\[:port\]/],
    ['postgres://u:secret@a:54x/db', /hosts are not/],
    ['postgres://u:secret@a:5432,[zz]/db', /hosts are not/],
    ['postgres://u:secret@a b,c/db', /percent-encoded/],
    // Hosts named twice, or several in libpq's query form: the search would not try where the connections go.
    ['postgres://u:secret@a:1,b:2/db?host=c', /host= or port= in its query.*h1:5432,h2:5432/],
    ['postgres://u:secret@/db?host=a,b', /host= or port= in its query/],
    ['postgres://u:secret@a/db?host=a&port=1,2', /host= or port= in its query/],
    ['postgres://u:secret@a/db?sslmode=bogus', /sslmode is "bogus"; the service takes disable, prefer, require, verify-ca, verify-full\./],
    ['postgres://u:secret@a,b/db?sslmode=allow', /sslmode is "allow"/],
    ['postgres://u:secret@a/db?sslmode=allow&uselibpqcompat=true', /sslmode is "allow"/]
  ] as const) {
    assert.throws(() => databaseHosts(url), (error: Error) => message.test(error.message) && !error.message.includes('secret'), url)
  }
})

test('a host named for a log line is its host and port alone', () => {
  assert.equal(hostOf('postgres://u:secret@h2:5433/db?x=1'), 'h2:5433')
  assert.equal(hostOf('postgres:///db'), 'localhost')
  assert.equal(hostOf('postgres://u:p@ss@h1:5432/db'), 'h1:5432')
})

test('a refused sslmode or target_session_attrs is quoted in its one line, percent-encoded line breaks included', () => {
  for (const url of ['postgres://u@h/db?sslmode=x%0AFAKE:%20injected', 'postgres://u@h1,h2/db?target_session_attrs=x%0D%0Ay']) {
    assert.throws(() => databaseHosts(url), (error: Error) => !/[\r\n]/.test(error.message) && /"x\\[rn]/.test(error.message), url)
  }
})
