// The service's node:http server: its timeouts, and the order and bounds of pipelined requests.
import { createServer, ServerResponse, type IncomingMessage, type Server } from 'node:http'
import type { Socket } from 'node:net'
import type { FastifyServerFactory } from 'fastify'

/** How long an idle keep-alive connection stays open: above the 60 s idle timeout of common load balancers. */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000

/** How often Node looks for requests that are late in arriving: the 408 leaves this long after the limit at most. */
const ARRIVAL_CHECK_MS = 100

/** How often the connections are looked at for one on which no byte moves: it closes this long after its limit at most. */
const STALL_CHECK_MS = 1000

/**
 * Once the server closes, how long a connection between requests is left open after a byte last
 * moved on it: a keep-alive client's next request may be on its way, and a connection closed under
 * it would be reset, the request lost to its client. That request is answered (with `Connection:
 * close`, as every answer then); a connection quiet this long is closed.
 */
const CLOSING_GRACE_MS = 500

/** How often, once the server closes, the connections left open by closeGently are looked at again. */
const LOOK_AGAIN_MS = 100

/**
 * How long a connection may go without a byte moving either way before it is closed: longer than
 * a long poll's 60 s (which writes nothing until it answers; a stream writes a comment every 10 s),
 * than Node takes to close an idle keep-alive connection (the keep-alive timeout and a second), and
 * than a request may take to arrive, so that a late one still gets its 408 first.
 */
export function stalledAfterMs (requestTimeoutMs: number): number {
  return Math.max(KEEP_ALIVE_TIMEOUT_MS + 3000, requestTimeoutMs + 2 * ARRIVAL_CHECK_MS)
}

/**
 * How many requests of one connection may wait for the answers before theirs before Node stops
 * reading it. Node stops reading a connection once the answers waiting for it hold its high-water
 * mark (16 KiB on Node 20, 64 KiB from 22), and reads on when they are below it; a waiting request
 * has written nothing yet, so each is counted as its share of that mark (Node's own count,
 * `_onPendingData`). Without it, a client that pipelines without reading the answers would have
 * every request it sends parsed and held. Far above what a client pipelines behind a long poll:
 * reading stops mid-request too, and a request then left part-read gets its 408 on time.
 */
const MAX_WAITING = 1024

/**
 * Requests waiting so in all connections together, past which a connection with MAX_WAITING_PRESSED
 * waiting already that sends one more is closed. Node reads a connection in pieces of up to 64 KiB
 * and parses each whole before it can stop, so that one read of small requests is a few
 * thousand held (about 3 MB): connections that pipeline without reading, each stopped after its
 * read, would hold that much each, however many they are. Its waiting requests have not begun:
 * closing the connection drops them, and its client sends them again (RFC 9112 9.3.1).
 */
const MAX_WAITING_IN_ALL = 8192
const MAX_WAITING_PRESSED = 8

/** Its requests waiting for the answers before theirs. */
const WAITING = Symbol('plantstore.waiting')
type Connection = Socket & { [WAITING]?: number }

/** On a request waiting for the answers before its own: what answers it in its turn instead of the service, if anything. */
const TURN = Symbol('plantstore.turn')
type Queued = IncomingMessage & { [TURN]?: { instead?: () => void } }

/**
 * Has `answer` answer `request` when its turn comes, instead of the service, if it is waiting
 * for the answers before its own (pipelined): true then. For a request that failed while it
 * waited (its body malformed, or too slow): it is never carried out, and its answer comes in
 * order. Its first failure is the one answered (a malformed body is also late, later).
 */
export function answerInItsTurn (request: IncomingMessage, answer: () => void): boolean {
  const turn = (request as Queued)[TURN]
  if (turn !== undefined) turn.instead ??= answer
  return turn !== undefined
}

/**
 * The HTTP server, which hands Fastify the requests of a connection one at a time: Node parses
 * pipelined requests as they arrive and would start them all at once, so that a DELETE sent after
 * a POST on one connection could run before the POST's commit (RFC 9112 9.3.2 allows that for safe
 * methods only). A request whose connection is still busy with the answer before it starts once
 * that answer is done, when Node hands its own answer the connection.
 *
 * A request's headers and body may take `requestTimeoutMs` to arrive; one still arriving then is
 * answered 408 (clientErrorHandler) and its connection closed, at Node's next look for late
 * requests: never before the limit, and at most ARRIVAL_CHECK_MS after it. `pipelined.waiting`
 * counts the requests waiting in all its connections. A connection on which no byte moves for
 * `stalledMs` is closed (closeStalled).
 */
export function httpServer (requestTimeoutMs: number, pipelined = { waiting: 0 }, stalledMs = stalledAfterMs(requestTimeoutMs)): FastifyServerFactory {
  return (handler) => tendConnections(Object.assign(createServer({
    requestTimeout: requestTimeoutMs,
    headersTimeout: requestTimeoutMs,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    connectionsCheckingInterval: ARRIVAL_CHECK_MS,
    // Node would answer a request without Host with an empty 400; the edge check answers it.
    requireHostHeader: false
  }, (request: Queued, response) => {
    const connection: Connection = request.socket
    // Read behind an answer that closed the connection (a refusal before its body was read), or
    // closed below while the rest of its read is parsed: never begun, as no answer could reach its
    // client (RFC 9112 9.6), which sends it again.
    if (closing(connection)) return
    // Whatever answers it (a preflight, an earlier refusal, its own 400), its connection ends with it.
    if (framingUntrusted(request)) response.shouldKeepAlive = false
    if (response.socket !== null) return handler(request, response)
    const waitingHere = connection[WAITING] ?? 0
    if (pipelined.waiting >= MAX_WAITING_IN_ALL && waitingHere >= MAX_WAITING_PRESSED) return connection.destroy()
    connection[WAITING] = waitingHere + 1
    pipelined.waiting++
    const waiting = response as ServerResponse & { _onPendingData?: (bytes: number) => void }
    const weight = Math.max(1, Math.floor(connection.writableHighWaterMark / MAX_WAITING))
    waiting._onPendingData?.(weight)
    const turn: { instead?: () => void } = {}
    request[TURN] = turn
    // Counted until its turn comes, or until its connection closes first (then it never comes).
    let counted = true
    const uncount = (): void => {
      if (!counted) return
      counted = false
      pipelined.waiting--
      connection[WAITING]!--
    }
    request.once('close', uncount)
    response.once('socket', () => {
      uncount()
      waiting._onPendingData?.(-weight)
      request[TURN] = undefined
      // Its connection closed before its turn came (the answer before it cut short: Node then ends
      // that answer as if written, and hands the closed connection on): dropped, never begun.
      if (closing(connection)) return
      if (turn.instead !== undefined) return turn.instead()
      handler(request, response)
    })
  }), {
    // Every header line is read, however many: Node would drop those past its count (1,000),
    // and the checks would not see them (a second Authorization, an Expect). The size limit
    // (16 KiB, then 431) bounds them.
    maxHeadersCount: 0
  }), stalledMs)
}

/** Keeps `server`'s open connections, closes those that stall, and when it closes, lets those still writing an answer or just used finish. */
function tendConnections<S extends Server> (server: S, stalledMs: number): S {
  const connections = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    connections.add(socket)
    socket.once('close', () => connections.delete(socket))
  })
  return closeGently(closeStalled(server, connections, stalledMs), connections)
}

/**
 * True for an HTTP/1.0 request with a Transfer-Encoding, which that version does not have: a peer
 * may frame it otherwise (request smuggling), so it is refused (edge.ts) and its connection
 * closes, whatever answers it (RFC 9112 6.1).
 */
export function framingUntrusted (request: IncomingMessage): boolean {
  return request.httpVersionMinor === 0 && request.headers['transfer-encoding'] !== undefined
}

/** True once the connection is closed, or closing after an answer that ends it: nothing more is answered on it. */
function closing (connection: Socket): boolean {
  return connection.destroyed || connection.writableEnded
}

/** The answer a connection is writing, as Node keeps it on the socket (none between requests). */
type Answering = Socket & { _httpMessage?: ServerResponse | { finished: boolean } | null }

/** Stands for an answer under way on a connection between requests, for one call of Node's closeIdleConnections. */
const UNDER_WAY = { finished: false }

/**
 * Node's closeIdleConnections (which the server's close calls, and the shutdown every 100 ms),
 * except that it leaves open a connection whose answer has been ended but not yet written out (a
 * long answer to a client that reads slowly, or one pipelined behind it), and one between requests
 * on which a byte moved within CLOSING_GRACE_MS (since the first call, for one not seen before).
 * Node takes both for idle, an answer being `finished` once ended, and would destroy the first with
 * its answer's last bytes unsent and the second under a request on its way. Once written, or quiet,
 * a later call closes them (while it leaves any open, it makes one itself every LOOK_AGAIN_MS); the
 * shutdown's deadline closes them anyway.
 */
function closeGently<S extends Server> (server: S, connections: ReadonlySet<Answering & Watched>): S {
  const closeIdle = server.closeIdleConnections.bind(server)
  const lastMoved = new WeakMap<Socket, { moved: number, at: number }>()
  let again: NodeJS.Timeout | undefined
  server.closeIdleConnections = () => {
    const now = performance.now()
    const writing: ServerResponse[] = []
    const betweenRequests: Answering[] = []
    for (const socket of connections) {
      const answer = socket._httpMessage
      if (answer instanceof ServerResponse) {
        if (answer.writableEnded && !answer.writableFinished && settable(answer)) writing.push(answer)
        continue
      }
      const moved = bytesMoved(socket)
      if (moved === undefined) continue // closing already
      let last = lastMoved.get(socket)
      if (last?.moved !== moved) lastMoved.set(socket, last = { moved, at: now })
      if (now - last.at < CLOSING_GRACE_MS) betweenRequests.push(socket)
    }
    // Node skips a connection whose answer is not `finished`: for this call, these are not.
    for (const answer of writing) answer.finished = false
    const before = betweenRequests.map(socket => socket._httpMessage)
    for (const socket of betweenRequests) socket._httpMessage = UNDER_WAY
    try {
      closeIdle()
    } finally {
      for (const answer of writing) answer.finished = true
      betweenRequests.forEach((socket, i) => { socket._httpMessage = before[i] })
    }
    // Those left open are looked at again, whoever closes the server, until none is.
    if ((writing.length > 0 || betweenRequests.length > 0) && again === undefined) {
      again = setTimeout(() => {
        again = undefined
        server.closeIdleConnections()
      }, LOOK_AGAIN_MS).unref()
    }
  }
  return server
}

/** True where `finished` is a plain property, as on Node 20 to 24: were it a getter, Node's own close goes on as it is. */
function settable (answer: ServerResponse): boolean {
  return Object.getOwnPropertyDescriptor(answer, 'finished')?.writable === true
}

/** A connection's handle: libuv's counts of the bytes it has read and been handed to write, and of those still queued for the kernel (which Node's own socket timeout reads too). */
type Watched = Socket & { _handle?: { bytesRead: number, bytesWritten: number, writeQueueSize: number } | null }

/** The bytes that have moved on a connection: those read, and those written that the kernel has taken (libuv takes a large write a piece at a time); undefined once it is closing. */
function bytesMoved (socket: Watched): number | undefined {
  const handle = socket._handle
  return handle == null ? undefined : handle.bytesRead + handle.bytesWritten - handle.writeQueueSize
}

/**
 * Closes a connection on which no byte has moved either way for `stalledMs` (a client that stops
 * reading its answer would hold the answer's memory for as long as it likes). Node's own socket
 * timeout would do the same, but it makes a new timer for each request and moves it on every read
 * and write, a measurable share of a POST (docs/performance.md); this looks at each connection once
 * every STALL_CHECK_MS while the server listens, and closes one that has not moved in as many looks
 * as `stalledMs` holds (bytesMoved): never before `stalledMs`, at most one look after it.
 */
function closeStalled<S extends Server> (server: S, connections: ReadonlySet<Watched>, stalledMs: number): S {
  const looks = Math.ceil(stalledMs / STALL_CHECK_MS)
  // `still` counts the looks that found nothing moved since the one that did (or since it connected: from -1, as that came between looks).
  const watched = new WeakMap<Watched, { moved: number, still: number }>()
  const look = (): void => {
    for (const socket of connections) {
      let last = watched.get(socket)
      if (last === undefined) watched.set(socket, last = { moved: 0, still: -1 })
      const moved = bytesMoved(socket)
      if (moved === undefined) continue // closing already
      if (moved !== last.moved) {
        last.moved = moved
        last.still = 0
      } else if (++last.still >= looks) {
        socket.destroy()
      }
    }
  }
  let check: NodeJS.Timeout | undefined
  server.on('listening', () => {
    clearInterval(check)
    check = setInterval(look, STALL_CHECK_MS).unref()
  })
  server.on('close', () => { clearInterval(check) })
  return server
}
