import type { FastifyReply } from 'fastify'

/** Adds `field` to the answer's Vary header, after the `Origin` that CORS may have put there, not in its place. */
export function varyAlsoOn (reply: FastifyReply, field: string): void {
  const vary = reply.getHeader('vary')
  reply.header('vary', vary === undefined ? field : `${String(vary)}, ${field}`)
}
