// One attempt of one delivery: a signed POST of the plant record to the subscriber's URL, over a
// connection to an address the SSRF guard allows, within the timeout, never following a redirect.
import http from 'node:http'
import https from 'node:https'
import type { LookupFunction } from 'node:net'
import { stringifyExact } from '../json.js'
import type { ClaimedDelivery } from '../store/webhooks.js'
import { FORBIDDEN, guardedLookup, isForbiddenAddress, literalAddress } from './addresses.js'
import { signatureHeader } from './signing.js'

/** What the receiver answered, or why it did not (`abandoned`: the server, stopping, cut it off), and how long that took. */
export interface AttemptResult { statusCode?: number, error?: string, durationMs: number, retryAfter?: string, abandoned?: true }

export interface SenderOptions {
  /** WEBHOOKS_ALLOW_PRIVATE: connect to loopback and private addresses too (local tests only). */
  allowPrivate: boolean
  /** How long the receiver has to answer, headers and body, in ms (SPEC: 15 s). */
  timeoutMs: number
  /** Name resolution, for tests: dns.lookup by default. */
  resolve?: Parameters<typeof guardedLookup>[0]['resolve']
  /** How long a kept-alive connection to a receiver may stay idle before it is closed, in ms: longer than the time between attempts under a stream of changes. */
  idleSocketMs?: number
}

/** The largest answer body read (and thrown away) before the connection is given up: receivers answer with little. */
const MAX_ANSWER_BYTES = 64 * 1024

/** The `webhook-id` of a change: the same on every attempt and replay, so receivers can de-duplicate. */
export const webhookId = (position: bigint): string => `chg_${position}`

/** Sends deliveries over keep-alive connections, one pool for http and one for https. */
export class Sender {
  private readonly lookup: LookupFunction
  private readonly agents: { 'http:': http.Agent, 'https:': https.Agent }

  constructor (private readonly options: SenderOptions) {
    this.lookup = guardedLookup({ allowPrivate: options.allowPrivate, resolve: options.resolve })
    // An idle kept-alive connection is closed after a while: receivers come and go, and so would their sockets.
    const agent = { keepAlive: true, maxSockets: 64, timeout: options.idleSocketMs ?? 30_000 }
    this.agents = { 'http:': new http.Agent(agent), 'https:': new https.Agent(agent) }
  }

  /** Attempts `delivery` at `now`; resolves with the outcome, never rejects. */
  attempt (delivery: ClaimedDelivery, now: Date, signal?: AbortSignal): Promise<AttemptResult> {
    const started = performance.now()
    const took = (): number => performance.now() - started
    const url = new URL(delivery.url)
    // Port 0 (refused at registration since; a subscription stored before may hold it) names no
    // receiver: a connection would go to the scheme's default port instead.
    if (url.port === '0') return Promise.resolve({ error: 'refused: port 0 names no port to connect to', durationMs: took() })
    const literal = literalAddress(url)
    if (!this.options.allowPrivate && literal !== undefined && isForbiddenAddress(literal)) {
      return Promise.resolve({ error: `refused: ${literal} is a private, loopback or reserved address`, durationMs: took() })
    }
    const id = webhookId(delivery.position)
    const timestamp = Math.floor(now.getTime() / 1000)
    const body = stringifyExact(delivery.plant)
    const client = url.protocol === 'https:' ? https : http
    return new Promise<AttemptResult>(resolve => {
      let settled = false
      const settle = (result: Omit<AttemptResult, 'durationMs'>): void => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        resolve({ ...result, durationMs: took() })
      }
      const request = client.request(url, {
        method: 'POST',
        agent: this.agents[url.protocol as 'http:' | 'https:'],
        lookup: this.lookup,
        signal,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(body),
          'user-agent': 'plantstore-webhooks/1',
          'webhook-id': id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': signatureHeader(delivery.secrets, id, timestamp, body),
          'webhook-event-type': delivery.type,
          'webhook-position': delivery.position.toString()
        }
      }, response => {
        // The answer counts once it has arrived whole (or too long to bother with): its status decides.
        let bytes = 0
        const done = (): void => settle({ statusCode: response.statusCode, retryAfter: response.headers['retry-after'] })
        response.on('data', (chunk: Buffer) => {
          bytes += chunk.length
          if (bytes > MAX_ANSWER_BYTES) { done(); request.destroy() }
        })
        response.on('end', done)
        response.on('error', (error: Error) => settle(failure(error)))
      })
      const timer = setTimeout(() => {
        settle({ error: `no answer within ${this.options.timeoutMs / 1000} s` })
        request.destroy()
      }, this.options.timeoutMs)
      request.on('error', (error: Error) => settle(failure(error)))
      request.end(body)
    })
  }

  close (): void {
    for (const agent of Object.values(this.agents)) agent.destroy()
  }
}

/** A failed attempt's result; abandoned when its signal cut it off. */
function failure (error: Error): Omit<AttemptResult, 'durationMs'> {
  return error.name === 'AbortError' ? { error: reasonOf(error), abandoned: true } : { error: reasonOf(error) }
}

/** OpenSSL's error text (its error code, library, function, reason, source file and line): the reason alone is what went wrong. */
const OPENSSL_ERROR = /(?:\S*:)?error:[0-9A-F]+:[^:]*:[^:]*:([^:]*)(?::[^:\s]*\.c:\d+:)?/g

/** An error as the delivery log shows it: one line, with the system's code when there is one, and no internals. */
export function reasonOf (error: Error & { code?: string }): string {
  if (error.code === FORBIDDEN) return `refused: ${error.message}`
  if (error.name === 'AbortError') return 'abandoned: the server was stopping'
  const message = error.message.replace(OPENSSL_ERROR, (_, reason: string) => `TLS: ${reason}; `).replace(/\s+/g, ' ').replace(/[;\s]+$/, '')
  return error.code === undefined ? message : `${message} (${error.code})`
}
