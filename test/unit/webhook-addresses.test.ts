import assert from 'node:assert/strict'
import type dns from 'node:dns'
import http from 'node:http'
import net from 'node:net'
import { test } from 'node:test'
import { FORBIDDEN, guardedLookup, isForbiddenAddress, literalAddress, refusalOfUrl } from '../../src/webhooks/addresses.js'

/** A stand-in for dns.lookup answering from `answers` (unknown names: ENOTFOUND), with its callback shapes. */
function fakeResolver (answers: Record<string, string[]>): typeof dns.lookup {
  const lookup = (hostname: string, options: any, callback?: any): void => {
    if (typeof options === 'function') [callback, options] = [options, {}]
    if (typeof options === 'number') options = { family: options }
    const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : (options.family ?? 0)
    const addresses = (answers[hostname] ?? [])
      .map(address => ({ address, family: net.isIP(address) }))
      .filter(address => family === 0 || address.family === family)
    process.nextTick(() => {
      if (addresses.length === 0) callback(Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname }))
      else if (options.all === true) callback(null, addresses)
      else callback(null, addresses[0].address, addresses[0].family)
    })
  }
  return lookup as unknown as typeof dns.lookup
}

/** Each range with addresses in it (first, last, others) and addresses just outside it that are public. */
const RANGES: Array<{ range: string, inside: string[], outside: string[] }> = [
  { range: '0.0.0.0/8', inside: ['0.0.0.0', '0.255.255.255'], outside: ['1.0.0.0'] },
  { range: '10.0.0.0/8', inside: ['10.0.0.0', '10.255.255.255'], outside: ['9.255.255.255', '11.0.0.0', '11.0.0.1'] },
  { range: '100.64.0.0/10', inside: ['100.64.0.0', '100.127.255.255'], outside: ['100.63.255.255', '100.128.0.0', '100.128.0.1'] },
  { range: '127.0.0.0/8', inside: ['127.0.0.0', '127.0.0.1', '127.255.255.255'], outside: ['126.255.255.255', '128.0.0.0'] },
  { range: '169.254.0.0/16', inside: ['169.254.0.0', '169.254.169.254', '169.254.255.255'], outside: ['169.253.255.255', '169.255.0.0'] },
  { range: '172.16.0.0/12', inside: ['172.16.0.0', '172.31.255.255'], outside: ['172.15.255.255', '172.32.0.0', '172.32.0.1'] },
  { range: '192.0.0.0/24', inside: ['192.0.0.0', '192.0.0.255'], outside: ['191.255.255.255', '192.0.1.0'] },
  { range: '192.0.2.0/24', inside: ['192.0.2.0', '192.0.2.255'], outside: ['192.0.1.255', '192.0.3.0'] },
  { range: '192.88.99.0/24', inside: ['192.88.99.0', '192.88.99.255'], outside: ['192.88.98.255', '192.88.100.0'] },
  { range: '192.168.0.0/16', inside: ['192.168.0.0', '192.168.255.255'], outside: ['192.167.255.255', '192.169.0.0'] },
  { range: '198.18.0.0/15', inside: ['198.18.0.0', '198.19.255.255'], outside: ['198.17.255.255', '198.20.0.0'] },
  { range: '198.51.100.0/24', inside: ['198.51.100.0', '198.51.100.255'], outside: ['198.51.99.255', '198.51.101.0'] },
  { range: '203.0.113.0/24', inside: ['203.0.113.0', '203.0.113.255'], outside: ['203.0.112.255', '203.0.114.0'] },
  { range: '224.0.0.0/4', inside: ['224.0.0.0', '239.255.255.255'], outside: ['223.255.255.255'] },
  { range: '240.0.0.0/4', inside: ['240.0.0.0', '255.255.255.255'], outside: [] },
  { range: '::/128, ::1/128', inside: ['::', '::1', '0:0:0:0:0:0:0:1'], outside: [] },
  { range: '64:ff9b:1::/48', inside: ['64:ff9b:1::', '64:ff9b:1::808:808', '64:ff9b:1:ffff:ffff:ffff:ffff:ffff'], outside: [] },
  { range: '100::/64', inside: ['100::', '100::ffff:ffff:ffff:ffff'], outside: [] },
  { range: '2001::/23', inside: ['2001::', '2001:0:4136:e378:8000:63bf:3fff:fdd2', '2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: ['2001:200::', '2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff'] },
  { range: '2001:db8::/32', inside: ['2001:db8::', '2001:db8:ffff:ffff:ffff:ffff:ffff:ffff'], outside: ['2001:db7:ffff:ffff:ffff:ffff:ffff:ffff', '2001:db9::'] },
  { range: '3fff::/20', inside: ['3fff::', '3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: ['3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '3fff:1000::'] },
  { range: 'fc00::/7', inside: ['fc00::', 'fd00::', 'fd00:ec2::254', 'fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: [] },
  { range: 'fe80::/10', inside: ['fe80::', 'fe80::1', 'febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: [] },
  { range: 'fec0::/10', inside: ['fec0::', 'feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: [] },
  { range: 'ff00::/8', inside: ['ff00::', 'ff02::1', 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'], outside: [] },
  // Only global unicast holds public IPv6 hosts: the unassigned space around it is refused too.
  { range: 'outside 2000::/3', inside: ['1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '4000::', 'fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff', '::2:0:0:1'], outside: ['2000::', '3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'] }
]

const PUBLIC = ['93.184.215.14', '8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '2a00:1450:4001:82a::200e', '172.32.0.1', '100.128.0.1', '11.0.0.1']

test('every forbidden range: its first and last address are refused, the public ones just outside are not', () => {
  for (const { range, inside, outside } of RANGES) {
    for (const address of inside) assert.equal(isForbiddenAddress(address), true, `${address} in ${range}`)
    for (const address of outside) assert.equal(isForbiddenAddress(address), false, `${address} outside ${range}`)
  }
})

test('IPv6 forms embedding an IPv4 address are judged by that address', () => {
  const forbidden = [
    '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:169.254.169.254', '::ffff:a9fe:a9fe', '::ffff:10.0.0.1', '::ffff:0.0.0.0', '::ffff:255.255.255.255',
    '::127.0.0.1', '::7f00:1', '::169.254.169.254',
    '64:ff9b::7f00:1', '64:ff9b::127.0.0.1', '64:ff9b::a9fe:a9fe', '64:ff9b::192.168.1.1',
    '2002:7f00:1::', '2002:a9fe:a9fe::1', '2002:c0a8:101::1', '2002::', '2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff'
  ]
  for (const address of forbidden) assert.equal(isForbiddenAddress(address), true, address)
  const allowed = ['::ffff:8.8.8.8', '::ffff:808:808', '::8.8.8.8', '64:ff9b::808:808', '64:ff9b::8.8.8.8', '2002:808:808::', '2002:808:808:1:2:3:4:5']
  for (const address of allowed) assert.equal(isForbiddenAddress(address), false, address)
  // Neighbours of the embedding prefixes are not taken for them.
  assert.equal(isForbiddenAddress('2001:ffff:7f00:1::'), false, 'not 6to4')
  assert.equal(isForbiddenAddress('2003:7f00:1::'), false, 'not 6to4')
  assert.equal(isForbiddenAddress('64:ff9b::1:0:808:808'), true, 'outside 64:ff9b::/96 and outside global unicast')
})

test('public addresses are allowed', () => {
  for (const address of PUBLIC) assert.equal(isForbiddenAddress(address), false, address)
  assert.equal(isForbiddenAddress('2606:4700:4700::1111'.toUpperCase()), false)
  assert.equal(isForbiddenAddress('2606:4700:4700::1111%eth0'), false)
})

test('zone ids and upper case do not hide an address', () => {
  for (const address of ['fe80::1%eth0', 'fe80::1%1', 'ff02::1%lo', 'FE80::1', 'FD00:EC2::254', '::FFFF:127.0.0.1', '::FFFF:7F00:1', '64:FF9B::7F00:1', '::1%lo']) {
    assert.equal(isForbiddenAddress(address), true, address)
  }
})

test('what is not an IP literal is refused', () => {
  for (const text of ['', 'localhost', 'example.com', '127.1', '0x7f000001', '2130706433', '010.0.0.1', '1.2.3.4.5', '[::1]', '::ffff:1.2.3', 'fe80::1%', ' 8.8.8.8']) {
    assert.equal(isForbiddenAddress(text), true, JSON.stringify(text))
  }
})

test('literalAddress: IP hosts without brackets, names undefined', () => {
  assert.equal(literalAddress(new URL('http://[::1]:8080/x')), '::1')
  assert.equal(literalAddress(new URL('http://[::ffff:127.0.0.1]/')), '::ffff:7f00:1')
  assert.equal(literalAddress(new URL('http://127.1/')), '127.0.0.1')
  assert.equal(literalAddress(new URL('https://8.8.8.8/')), '8.8.8.8')
  assert.equal(literalAddress(new URL('https://example.com/')), undefined)
  assert.equal(literalAddress(new URL('http://localhost:3000/')), undefined)
})

const strict = { allowPrivate: false, resolve: fakeResolver({ 'hooks.example.com': ['93.184.215.14', '2606:4700:4700::1111'] }) }

test('refusalOfUrl: scheme, credentials, length and host rules', async () => {
  const refusals: Array<[string, RegExp]> = [
    ['ftp://hooks.example.com/', /scheme is ftp/],
    ['file:///etc/passwd', /scheme is file/],
    ['javascript:alert(1)', /scheme is javascript/],
    ['ws://hooks.example.com/', /scheme is ws/],
    ['http://u:p@hooks.example.com/', /user name or password/],
    ['http://u@hooks.example.com/', /user name or password/],
    ['http://:@hooks.example.com/', /user name or password/],
    ['http://@hooks.example.com/', /user name or password/],
    ['http:u@hooks.example.com/', /user name or password/],
    [`http://${'a'.repeat(64)}.example.com/`, /not a valid host name/],
    [`http://${'a.'.repeat(127)}com/`, /not a valid host name/],
    ['http://', /absolute URL/],
    ['http:///', /absolute URL/],
    ['/hooks', /absolute URL/],
    ['hooks.example.com', /absolute URL/],
    ['', /absolute URL/],
    [`https://hooks.example.com/${'a'.repeat(2048)}`, /longer than 2048/],
    ['https://8.8.8.8:99999/', /host or port cannot be read/],
    ['http://hooks.example.com:8o/', /host or port cannot be read/],
    ['http://[fe80::1%25eth0]/', /host or port cannot be read/],
    ['http://[::1/', /host or port cannot be read/],
    ['http://hooks.example.com:0/', /port is 0/],
    ['https://127.0.0.1:00/', /port is 0/],
    ['http:hooks.example.com/', /written out/],
    ['http:/hooks.example.com/', /written out/],
    ['http:///hooks.example.com/', /written out/],
    ['https:\\\\hooks.example.com/', /written out/],
    ['http://hooks.example.com\\@evil.example/', /written out/],
    ['https://hooks.example.com/?a=\\', /percent-encode/]
  ]
  for (const options of [strict, { allowPrivate: true }]) {
    for (const [url, why] of refusals) {
      const refused = await refusalOfUrl(url, options)
      assert.match(refused ?? 'accepted', why, url)
      assert.match(refused!, /^The .*\.$/, 'one sentence')
    }
  }
  const longest = 'https://hooks.example.com/'
  assert.equal(await refusalOfUrl(longest + 'a'.repeat(2048 - longest.length), strict), undefined, 'exactly 2048 characters')
  assert.equal(await refusalOfUrl('https://hooks.example.com/hooks?x=1', strict), undefined)
  assert.equal(await refusalOfUrl('http://hooks.example.com:8080/', strict), undefined)
  assert.equal(await refusalOfUrl('https://hooks.example.com/a@b?c=@#@', strict), undefined, 'an @ after the host is no user name')
  assert.equal(await refusalOfUrl(`http://${'a'.repeat(63)}.example/`, { allowPrivate: true }), undefined, 'a label of 63 characters')
})

test('refusalOfUrl: IP literals, numeric spellings of loopback included', async () => {
  // WHATWG URL parsing turns these spellings into 127.0.0.1 before anything else sees them.
  for (const url of ['http://127.0.0.1/', 'http://127.1/', 'http://0x7f000001/', 'http://2130706433/', 'http://0177.0.0.1/', 'http://[::1]/', 'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:7f00:1]:8080/', 'http://169.254.169.254/latest/meta-data', 'http://[fd00:ec2::254]/', 'http://10.1.2.3/', 'http://0.0.0.0:8080/', 'https://[64:ff9b::7f00:1]/']) {
    assert.match(await refusalOfUrl(url, strict) ?? 'accepted', /loopback, private or reserved/, url)
  }
  assert.equal(await refusalOfUrl('http://8.8.8.8/', strict), undefined)
  assert.equal(await refusalOfUrl('https://[2606:4700:4700::1111]:8443/hook', strict), undefined)
})

test('refusalOfUrl: names are resolved, and refused when any address is forbidden or none is found', async () => {
  assert.match(await refusalOfUrl('http://localhost/', { allowPrivate: false }) ?? 'accepted', /localhost resolves to (127\.0\.0\.1|::1)/, 'the real resolver')
  const resolve = fakeResolver({ 'mixed.test': ['93.184.215.14', '10.0.0.7'], 'metadata.test': ['169.254.169.254'], 'v6.test': ['2606:4700:4700::1111', 'fe80::1'], 'public.test': ['8.8.8.8', '2a00:1450:4001:82a::200e'] })
  assert.match(await refusalOfUrl('https://mixed.test/', { allowPrivate: false, resolve }) ?? 'accepted', /mixed\.test resolves to 10\.0\.0\.7/)
  assert.match(await refusalOfUrl('https://metadata.test/', { allowPrivate: false, resolve }) ?? 'accepted', /169\.254\.169\.254/)
  assert.match(await refusalOfUrl('https://v6.test/', { allowPrivate: false, resolve }) ?? 'accepted', /fe80::1/)
  assert.match(await refusalOfUrl('https://nowhere.test/', { allowPrivate: false, resolve }) ?? 'accepted', /nowhere\.test does not resolve \(ENOTFOUND\)/)
  assert.equal(await refusalOfUrl('https://public.test/hooks', { allowPrivate: false, resolve }), undefined)
})

test('refusalOfUrl with allowPrivate: private addresses are taken and nothing is resolved', async () => {
  const resolve = (() => { throw new Error('resolved') }) as unknown as typeof dns.lookup
  for (const url of ['http://127.0.0.1:8080/', 'http://[::1]:8080/', 'http://localhost:8080/hooks', 'http://nowhere.test/']) {
    assert.equal(await refusalOfUrl(url, { allowPrivate: true, resolve }), undefined, url)
  }
})

/** Calls `lookup` as Node would and gives back what its callback got. */
function called (lookup: net.LookupFunction, hostname: string, options: dns.LookupOptions): Promise<{ error: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number }> {
  return new Promise(resolve => lookup(hostname, options, (error, address, family) => resolve({ error, address, family })))
}

test('guardedLookup answers in the shape asked for, honouring family', async () => {
  const lookup = guardedLookup({ allowPrivate: false, resolve: fakeResolver({ 'public.test': ['8.8.8.8', '2606:4700:4700::1111'] }) })
  assert.deepEqual(await called(lookup, 'public.test', { all: true }), { error: null, address: [{ address: '8.8.8.8', family: 4 }, { address: '2606:4700:4700::1111', family: 6 }], family: undefined })
  assert.deepEqual(await called(lookup, 'public.test', {}), { error: null, address: '8.8.8.8', family: 4 })
  assert.deepEqual(await called(lookup, 'public.test', { family: 6 }), { error: null, address: '2606:4700:4700::1111', family: 6 })
  assert.deepEqual(await called(lookup, 'public.test', { family: 6, all: true }), { error: null, address: [{ address: '2606:4700:4700::1111', family: 6 }], family: undefined })
  const missing = await called(lookup, 'nowhere.test', { all: true })
  assert.equal(missing.error?.code, 'ENOTFOUND', 'resolution errors pass through')
})

test('guardedLookup refuses when any address is forbidden, whether one or all are asked for', async () => {
  const resolve = fakeResolver({ 'mixed.test': ['8.8.8.8', '127.0.0.1'], 'v6.test': ['::1'] })
  for (const options of [{ all: true }, {}, { family: 4 }, { family: 4, all: true }]) {
    const { error } = await called(guardedLookup({ allowPrivate: false, resolve }), 'mixed.test', options)
    assert.equal(error?.code, FORBIDDEN, JSON.stringify(options))
    assert.match(error!.message, /mixed\.test resolves to 127\.0\.0\.1/)
  }
  assert.equal((await called(guardedLookup({ allowPrivate: false, resolve }), 'v6.test', {})).error?.code, FORBIDDEN)
  assert.deepEqual(await called(guardedLookup({ allowPrivate: true, resolve }), 'mixed.test', {}), { error: null, address: '8.8.8.8', family: 4 })
  assert.deepEqual(await called(guardedLookup({ allowPrivate: true, resolve }), 'v6.test', { all: true }), { error: null, address: [{ address: '::1', family: 6 }], family: undefined })
})

test('connection time: a name rebound to loopback is refused before connecting, and reaches it with allowPrivate', async (t) => {
  let received = 0
  const server = http.createServer((request, response) => { received++; response.end('hello') })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.after(() => server.close())
  const { port } = server.address() as net.AddressInfo
  const rebound = fakeResolver({ 'rebind.test': ['127.0.0.1'] })

  const asked: Array<boolean | undefined> = []
  const get = (allowPrivate: boolean, autoSelectFamily: boolean): Promise<{ status?: number, body?: string, error?: NodeJS.ErrnoException }> => new Promise(resolve => {
    const guarded = guardedLookup({ allowPrivate, resolve: rebound })
    const lookup: net.LookupFunction = (hostname, options, callback) => { asked.push(options.all); guarded(hostname, options, callback) }
    // autoSelectFamily is missing from @types/node 20's ClientRequestArgs, though http passes it to net.
    const options: http.RequestOptions & { autoSelectFamily: boolean } = { lookup, agent: false, autoSelectFamily }
    const request = http.request(`http://rebind.test:${port}/`, options, response => {
      let body = ''
      response.setEncoding('utf8').on('data', chunk => { body += chunk }).on('end', () => resolve({ status: response.statusCode, body }))
    })
    request.on('error', error => resolve({ error }))
    request.end()
  })

  // autoSelectFamily (happy eyeballs) asks the lookup for all addresses; without it, for one.
  for (const autoSelectFamily of [true, false]) {
    const refused = await get(false, autoSelectFamily)
    assert.equal(refused.error?.code, FORBIDDEN, `autoSelectFamily: ${autoSelectFamily}`)
    assert.match(refused.error!.message, /rebind\.test resolves to 127\.0\.0\.1/)
    assert.equal(received, 0, 'the server got no request')
  }
  for (const autoSelectFamily of [true, false]) {
    assert.deepEqual(await get(true, autoSelectFamily), { status: 200, body: 'hello' })
  }
  assert.equal(received, 2)
  assert.deepEqual(asked.map(Boolean), [true, false, true, false], 'Node asked for all addresses exactly when selecting the family itself')
})
