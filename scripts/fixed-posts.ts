// Sends exactly COUNT POSTs of new plants (ids FIRST, FIRST + 1, …) over CONCURRENCY keep-alive
// connections and prints their statuses: a load that ends after a number of requests rather than
// a number of seconds, for scripts/ab-instructions.sh (wrk runs for a time).
// Usage: node --import tsx scripts/fixed-posts.ts PORT TOKEN FIRST COUNT [CONCURRENCY (64)]
import { Agent, request } from 'node:http'

const [port, token, first, count, concurrency = 64] = process.argv.slice(2).map((arg, i) => i === 1 ? arg : Number(arg)) as [number, string, number, number, number?]
const agent = new Agent({ keepAlive: true, maxSockets: concurrency })
const statuses: Record<number, number> = {}
let next = first

async function post (id: number): Promise<void> {
  const body = `{"id":${id},"name":"Plant ${id}","tag":"bench"}`
  await new Promise<void>((resolve, reject) => {
    request({ host: '127.0.0.1', port, path: '/plants', method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, response => {
      response.resume()
      response.on('end', () => {
        statuses[response.statusCode ?? 0] = (statuses[response.statusCode ?? 0] ?? 0) + 1
        resolve()
      })
    }).on('error', reject).end(body)
  })
}

async function connection (): Promise<void> {
  while (next < first + count) await post(next++)
}

await Promise.all(Array.from({ length: concurrency }, connection))
agent.destroy()
console.log(JSON.stringify(statuses))
