import { connect, createServer, type Socket } from 'node:net'
import type { TestContext } from 'node:test'

/** A TCP proxy on loopback that a test can cut, the way a network or a database fails. */
export interface TcpProxy {
  /** The port it listens on (127.0.0.1). */
  port: number
  /** Resets every open connection (RST) and every new one as soon as it arrives. */
  reset: () => void
  /** Resets every new connection as it arrives; those open go on: a host that takes no more connections. */
  refuseNew: () => void
  /**
   * Forwards nothing, either way: open connections stay open, new ones are accepted and never
   * answered. Nothing is lost, only held, as in a network partition.
   */
  blackhole: () => void
  /** Forwards again: what a blackhole held goes through, new connections reach the target. */
  restore: () => void
  /** New connections go to `to` from now on (a virtual IP moved to another host); those open stay where they are. */
  retarget: (to: { host: string, port: number }) => void
}

interface Link { client: Socket, upstream?: Socket }

/**
 * Starts a proxy from 127.0.0.1:<any free port> to `target`, closed after the test. A reset
 * answers new connections with RST rather than closing the listener, so that the port cannot be
 * taken by another process before `restore`; the client sees the connection fail either way.
 */
export async function startTcpProxy (t: TestContext, target: { host: string, port: number }): Promise<TcpProxy> {
  let mode: 'open' | 'reset' | 'refuse-new' | 'blackhole' = 'open'
  let to = target
  const links = new Set<Link>()

  // Data is forwarded by hand, not piped: pipe() resumes a paused source on 'drain', and a
  // blackhole must keep both sides paused (the bytes wait in the kernel's buffers).
  const forward = (from: Socket, to: Socket): void => {
    from.on('data', (chunk: Buffer) => { if (!to.write(chunk)) from.pause() })
    to.on('drain', () => { if (mode === 'open') from.resume() })
    from.on('end', () => to.end())
    from.on('close', () => to.destroy())
  }
  const open = (link: Link): void => {
    const upstream = connect(to.port, to.host)
    link.upstream = upstream
    upstream.on('error', () => link.client.destroy())
    forward(link.client, upstream)
    forward(upstream, link.client)
  }
  const sockets = (link: Link): Socket[] => link.upstream === undefined ? [link.client] : [link.client, link.upstream]

  const server = createServer({ pauseOnConnect: true }, (client) => {
    if (mode === 'reset' || mode === 'refuse-new') {
      client.resetAndDestroy()
      return
    }
    const link: Link = { client }
    links.add(link)
    client.on('error', () => link.upstream?.destroy())
    client.on('close', () => links.delete(link))
    if (mode === 'open') {
      open(link)
      client.resume()
    }
    // In a blackhole the client waits, paused, with no upstream until `restore`.
  })
  await new Promise<void>(resolve => server.listen(0, '127.0.0.1', resolve))
  t.after(() => new Promise<void>(resolve => {
    for (const link of links) for (const socket of sockets(link)) socket.destroy()
    server.close(() => resolve())
  }))
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('the proxy has no port')

  return {
    port: address.port,
    reset: () => {
      mode = 'reset'
      for (const link of links) {
        link.client.resetAndDestroy()
        link.upstream?.destroy()
      }
      links.clear()
    },
    refuseNew: () => { mode = 'refuse-new' },
    retarget: (next) => { to = next },
    blackhole: () => {
      mode = 'blackhole'
      for (const link of links) for (const socket of sockets(link)) socket.pause()
    },
    restore: () => {
      mode = 'open'
      for (const link of links) {
        if (link.upstream === undefined) open(link)
        for (const socket of sockets(link)) socket.resume()
      }
    }
  }
}
