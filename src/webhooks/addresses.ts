// The server-side request forgery guard: a webhook URL is chosen by whoever holds an admin token,
// so without it the server could be made to POST to itself, to its private network or to the
// cloud's metadata service. Checked twice: when the URL is registered (a clear 400) and on every
// connection (names can be made to resolve elsewhere later: DNS rebinding).
import dns from 'node:dns'
import net from 'node:net'

/** Error code of the refusals below, so callers can tell them from network errors. */
export const FORBIDDEN = 'EWEBHOOKADDRESS'

/** The longest subscriber URL taken, in characters. */
const MAX_URL_LENGTH = 2048

const FORBIDDEN_V4: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], // private
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, 169.254.169.254 cloud metadata
  ['172.16.0.0', 12], // private
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // documentation
  ['192.88.99.0', 24], // 6to4 relay anycast (deprecated)
  ['192.168.0.0', 16], // private
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // documentation
  ['203.0.113.0', 24], // documentation
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4] // reserved, 255.255.255.255 broadcast
]

// Everything outside 2000::/3 is refused anyway (see isForbiddenAddress); those ranges are listed
// too so that this reads as the registry of special-purpose addresses it is taken from.
const FORBIDDEN_V6: Array<[string, number]> = [
  ['::', 128], // unspecified
  ['::1', 128], // loopback
  ['64:ff9b:1::', 48], // local-use NAT64: not globally reachable, its embedding varies
  ['100::', 64], // discard-only
  ['2001::', 23], // IETF protocol assignments, Teredo 2001::/32 included
  ['2001:db8::', 32], // documentation
  ['3fff::', 20], // documentation (RFC 9637)
  ['fc00::', 7], // unique-local, AWS metadata fd00:ec2::254 included
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated)
  ['ff00::', 8] // multicast
]

function blockList (ranges: Array<[string, number]>, type: 'ipv4' | 'ipv6'): net.BlockList {
  const list = new net.BlockList()
  for (const [network, prefix] of ranges) list.addSubnet(network, prefix, type)
  return list
}

// Kept apart per family: a BlockList matches IPv4 rules against ::ffff:a.b.c.d (only that form),
// and would match an IPv6 rule for ::ffff:0:0/96 against every IPv4 address.
const forbiddenV4 = blockList(FORBIDDEN_V4, 'ipv4')
const forbiddenV6 = blockList(FORBIDDEN_V6, 'ipv6')
/** Global unicast: the only IPv6 space with public hosts. */
const globalV6 = blockList([['2000::', 3]], 'ipv6')

/** The eight 16-bit groups of a valid IPv6 address (no zone id), a trailing dotted quad included. */
function groupsOf (address: string): number[] {
  let text = address
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text)
  if (quad !== null) {
    const [a, b, c, d] = quad.slice(1).map(Number)
    text = text.slice(0, quad.index) + ((a << 8) | b).toString(16) + ':' + ((c << 8) | d).toString(16)
  }
  const [head, tail] = text.split('::')
  const parse = (part: string | undefined): number[] => part === undefined || part === '' ? [] : part.split(':').map(group => parseInt(group, 16))
  const front = parse(head)
  const back = parse(tail)
  return tail === undefined ? front : [...front, ...new Array<number>(8 - front.length - back.length).fill(0), ...back]
}

const quadOf = (high: number, low: number): string => `${high >> 8}.${high & 0xff}.${low >> 8}.${low & 0xff}`

/** The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), if any. */
function embeddedV4 (groups: number[]): string | undefined {
  const zeros = (from: number, to: number): boolean => groups.slice(from, to).every(group => group === 0)
  if (zeros(0, 5) && groups[5] === 0xffff) return quadOf(groups[6], groups[7]) // ::ffff:a.b.c.d
  if (zeros(0, 6)) return quadOf(groups[6], groups[7]) // ::a.b.c.d, :: and ::1 too (both forbidden as 0.0.0.x)
  if (groups[0] === 0x64 && groups[1] === 0xff9b && zeros(2, 6)) return quadOf(groups[6], groups[7]) // 64:ff9b::/96
  if (groups[0] === 0x2002) return quadOf(groups[1], groups[2]) // 2002:aabb:ccdd::/48
  return undefined
}

/** True when `address` (an IPv4 or IPv6 literal, as Node's dns/net give them) is one a webhook must never reach without WEBHOOKS_ALLOW_PRIVATE: loopback, private, link-local, unique-local, cloud metadata, unspecified, multicast, reserved/documentation ranges, and any IPv6 form that embeds such an IPv4 address (IPv4-mapped ::ffff:a.b.c.d and ::ffff:7f00:1, IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96, 6to4 2002::/16). Anything that is not an IP literal: true (refuse what we cannot classify). */
export function isForbiddenAddress (address: string): boolean {
  const text = address.split('%')[0] // fe80::1%eth0: the zone does not change the address (upper case needs nothing: isIP, BlockList and parseInt take it)
  if (net.isIPv4(text)) return forbiddenV4.check(text, 'ipv4')
  if (!net.isIPv6(text)) return true
  const v4 = embeddedV4(groupsOf(text))
  if (v4 !== undefined) return forbiddenV4.check(v4, 'ipv4')
  return !globalV6.check(text, 'ipv6') || forbiddenV6.check(text, 'ipv6')
}

function forbiddenError (hostname: string, address: string): NodeJS.ErrnoException {
  const error: NodeJS.ErrnoException = new Error(`${hostname} resolves to ${address}, a loopback, private or reserved address webhooks may not reach`)
  error.code = FORBIDDEN
  return error
}

/** A `lookup` for http.request/https.request/net.connect (same signature as dns.lookup, honouring options.all and options.family, as Node's autoSelectFamily/happy-eyeballs calls it with all: true): resolves with `resolve` (default dns.lookup) and, unless allowPrivate, fails with an Error whose code is FORBIDDEN and message names the host and address when ANY resolved address is forbidden. This is the connection-time check (DNS rebinding: the name is resolved again on every attempt). */
export function guardedLookup ({ allowPrivate, resolve = dns.lookup }: { allowPrivate: boolean, resolve?: typeof dns.lookup }): net.LookupFunction {
  return (hostname, options, callback) => {
    // All addresses, even when one is asked for: a name answering one public and one private
    // address must not get through on the public one's account.
    resolve(hostname, { ...options, all: true }, (error, addresses) => {
      if (error !== null) return callback(error, options.all === true ? [] : '')
      if (addresses.length === 0) {
        const none: NodeJS.ErrnoException = new Error(`${hostname} has no address`)
        none.code = 'ENOTFOUND'
        return callback(none, options.all === true ? [] : '')
      }
      const bad = allowPrivate ? undefined : addresses.find(({ address }) => isForbiddenAddress(address))
      if (bad !== undefined) return callback(forbiddenError(hostname, bad.address), options.all === true ? [] : '')
      if (options.all === true) callback(null, addresses)
      else callback(null, addresses[0].address, addresses[0].family)
    })
  }
}

/** Every address `hostname` resolves to, through `resolve` as dns.lookup's callback API. */
function resolveAll (lookup: typeof dns.lookup, hostname: string): Promise<dns.LookupAddress[]> {
  return new Promise((resolve, reject) => {
    lookup(hostname, { all: true }, (error, addresses) => error === null ? resolve(addresses) : reject(error))
  })
}

/** The longest DNS name, in characters (RFC 1035: 255 octets on the wire). */
const MAX_HOST_NAME = 253

/** True when the URL's text has user information, even empty (`http://:@host/`), which URL's username and password leave blank. */
function hasUserInfo (text: string): boolean {
  const authority = /^[a-z][a-z0-9+.-]*:[/\\]*([^/\\?#]*)/i.exec(text)?.[1] ?? ''
  return authority.includes('@')
}

/** True when `name` (as URL gives it: lower case, punycode) is a DNS name: labels of 1 to 63 characters, at most MAX_HOST_NAME in all. */
function isHostName (name: string): boolean {
  const labels = (name.endsWith('.') ? name.slice(0, -1) : name).split('.')
  return name.length <= MAX_HOST_NAME && labels.every(label => label.length >= 1 && label.length <= 63)
}

/** Why a subscriber URL is refused at registration (one sentence for a 400 Error body), or undefined when it may be used. Rules: absolute URL, protocol http: or https: only, no username/password (not even empty ones), written out (`//` then the host, no backslash), at most 2048 characters, a host (a valid DNS name, or an IP literal), a port other than 0; if the host is an IP literal (IPv6 in brackets) it must not be forbidden; if it is a name, it is resolved (all addresses, via `resolve`, default dns.lookup with { all: true }) and refused if it does not resolve or any address is forbidden. With allowPrivate the address checks are skipped (the scheme/credential/length rules still apply) and no resolution is done. */
export async function refusalOfUrl (text: string, { allowPrivate, resolve = dns.lookup }: { allowPrivate: boolean, resolve?: typeof dns.lookup }): Promise<string | undefined> {
  if (text.length > MAX_URL_LENGTH) return `The URL is longer than ${MAX_URL_LENGTH} characters.`
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u0020\u007f]/.test(text)) return 'The URL holds a space or a control character; percent-encode it.'
  if (!URL.canParse(text)) {
    // A scheme and an authority that cannot be read: the host or the port is what is wrong.
    return /^[a-z][a-z0-9+.-]*:\/\/[^/]/i.test(text)
      ? 'The URL\'s host or port cannot be read: a host is a name or an address (IPv6 in brackets, without a zone), a port 1 to 65535.'
      : 'The URL is not an absolute URL, such as https://example.com/hooks.'
  }
  const url = new URL(text)
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return `The URL's scheme is ${url.protocol.slice(0, -1)}; only http and https are taken.`
  if (hasUserInfo(text)) return 'The URL must not carry a user name or password.'
  // The parser also reads `http:host/`, `http:///host/` and backslashes as slashes: shown back as
  // written, such a URL would not say where deliveries go.
  if (!/^https?:\/\/[^/?#]/i.test(text) || text.includes('\\')) return 'The URL must be written out, http:// or https:// then the host, without backslashes (percent-encode one).'
  if (url.hostname === '') return 'The URL has no host.'
  if (literalAddress(url) === undefined && !isHostName(url.hostname)) return `The URL's host is not a valid host name: labels of 1 to 63 characters, ${MAX_HOST_NAME} in all.`
  // Port 0 names no port a receiver listens on: a connection to it would go to the scheme's own.
  if (url.port === '0') return 'The URL\'s port is 0; name the port the receiver listens on, or none for the scheme\'s.'
  if (allowPrivate) return undefined
  const literal = literalAddress(url)
  if (literal !== undefined) {
    return isForbiddenAddress(literal) ? `The URL's host ${literal} is a loopback, private or reserved address webhooks may not reach.` : undefined
  }
  let addresses: dns.LookupAddress[]
  try {
    addresses = await resolveAll(resolve, url.hostname)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    return `The URL's host ${url.hostname} does not resolve${code === undefined ? '' : ` (${code})`}.`
  }
  if (addresses.length === 0) return `The URL's host ${url.hostname} does not resolve.`
  const bad = addresses.find(({ address }) => isForbiddenAddress(address))
  return bad === undefined ? undefined : `The URL's host ${forbiddenError(url.hostname, bad.address).message}.`
}

/** The host of `url` as a literal IP when it is one (brackets of IPv6 removed), else undefined: Node does not call `lookup` for IP literals, so a sender must check these itself with isForbiddenAddress before connecting. */
export function literalAddress (url: URL): string | undefined {
  const host = url.hostname.startsWith('[') && url.hostname.endsWith(']') ? url.hostname.slice(1, -1) : url.hostname
  return net.isIP(host) === 0 ? undefined : host
}
