// A webhook receiver for tests: a real HTTP server on 127.0.0.1 that keeps every request it gets
// (raw body and headers) and answers as the test says.
import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { TestContext } from 'node:test'

export interface Received { path: string, headers: IncomingHttpHeaders, body: string, at: number }

export interface Receiver {
  url: string
  port: number
  received: Received[]
  /** How the next requests are answered: 204 by default. */
  answer: (request: Received, response: ServerResponse) => void
  /** Resolves once `count` requests have arrived, or fails after `ms`. */
  waitFor: (count: number, ms?: number) => Promise<Received[]>
  close: () => Promise<void>
}

export async function startReceiver (t: TestContext, port = 0): Promise<Receiver> {
  const receiver: Receiver = {
    url: '',
    port: 0,
    received: [],
    answer: (_request, response) => { response.writeHead(204).end() },
    waitFor: async (count, ms = 10_000) => {
      const deadline = Date.now() + ms
      while (receiver.received.length < count) {
        if (Date.now() > deadline) throw new Error(`the receiver got ${receiver.received.length} requests within ${ms} ms, not ${count}`)
        await new Promise(resolve => setTimeout(resolve, 10))
      }
      return receiver.received
    },
    close: async () => {
      server.closeAllConnections()
      await new Promise(resolve => server.close(resolve))
    }
  }
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      const received = { path: request.url ?? '', headers: request.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() }
      receiver.received.push(received)
      receiver.answer(received, response)
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(port, '127.0.0.1', resolve)
  })
  receiver.port = (server.address() as AddressInfo).port
  receiver.url = `http://127.0.0.1:${receiver.port}`
  t.after(() => receiver.close())
  return receiver
}
