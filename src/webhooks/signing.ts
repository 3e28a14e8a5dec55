// Standard Webhooks signatures (https://www.standardwebhooks.com): an HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" keyed with the secret's bytes, sent as "v1,<base64>".
import { createHmac, randomBytes } from 'node:crypto'

const PREFIX = 'whsec_'

/** A new signing secret: `whsec_` and the base64 of 32 random bytes (the SPEC allows 24 to 64). */
export function newSecret (): string {
  return PREFIX + randomBytes(32).toString('base64')
}

/**
 * The `webhook-signature` header for one attempt: one `v1,` signature per secret, separated by
 * spaces, so that a receiver holding either secret (during a rotation) can verify it.
 */
export function signatureHeader (secrets: string[], id: string, timestamp: number, body: string): string {
  return secrets.map(secret => {
    const key = Buffer.from(secret.slice(PREFIX.length), 'base64')
    return 'v1,' + createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')
  }).join(' ')
}
