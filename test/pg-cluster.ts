// PostgreSQL 15 clusters of a test's own (SPEC section 10): a primary made with initdb and a
// standby cloned from it with pg_basebackup -R, on free ports, in a temporary folder, stopped and
// removed after the test. As root, every PostgreSQL command runs as the postgres user.
import { execFile, spawnSync } from 'node:child_process'
import { appendFileSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import { promisify } from 'node:util'
import pg from 'pg'
import { freePort } from './helpers.js'

const BIN = process.env.PG_BIN ?? '/usr/lib/postgresql/15/bin'

/** Why these tests cannot run here, or undefined when they can. */
export const CLUSTER_SKIP = existsSync(join(BIN, 'initdb')) && existsSync(join(BIN, 'pg_basebackup'))
  ? undefined
  : `no PostgreSQL binaries in ${BIN} (set PG_BIN): the failover tests need initdb, pg_ctl and pg_basebackup`

const asRoot = process.getuid?.() === 0

function commandLine (command: string, args: string[]): [string, string[]] {
  return asRoot ? ['runuser', ['-u', 'postgres', '--', join(BIN, command), ...args]] : [join(BIN, command), args]
}

/** Runs a PostgreSQL command to its end, blocking: for setting up, before the load starts. */
function run (command: string, args: string[]): void {
  const result = spawnSync(...commandLine(command, args), { encoding: 'utf8', timeout: 60_000 })
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status}): ${result.stderr}${result.stdout}`)
}

/** Runs a PostgreSQL command without blocking this process's event loop (the load goes on meanwhile). */
async function runAsync (command: string, args: string[]): Promise<void> {
  await promisify(execFile)(...commandLine(command, args), { timeout: 60_000 }).catch((error: Error & { stderr?: string }) => {
    throw new Error(`${command} ${args.join(' ')} failed: ${error.stderr ?? error.message}`)
  })
}

export interface Cluster {
  port: number
  url: string
  /** Runs one statement on a connection of its own. */
  query: <R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]) => Promise<pg.QueryResult<R>>
  start: () => Promise<void>
  /** pg_ctl stop: `immediate` is a crash (no checkpoint, clients cut). */
  stop: (mode: 'fast' | 'immediate') => Promise<void>
  promote: () => Promise<void>
}

/** The clusters running in each folder, stopped before it is removed. */
const running = new Map<string, Set<Cluster>>()

/** A folder the postgres user owns; after the test, its clusters are stopped and it is removed. */
function folder (t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-ha-'))
  if (asRoot) chownSync(dir, Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout), Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout))
  running.set(dir, new Set())
  t.after(async () => {
    for (const cluster of running.get(dir) ?? []) await cluster.stop('immediate').catch(() => {})
    running.delete(dir)
    rmSync(dir, { recursive: true, force: true })
  })
  return dir
}

/** A new cluster in `data`, its settings those of a small test server and `settings` (the standby's copied from it). */
function initdb (data: string, settings: string[]): void {
  run('initdb', ['-D', data, '-A', 'trust', '-U', 'postgres', '--no-sync'])
  appendFileSync(join(data, 'postgresql.conf'), ['fsync = off', 'shared_buffers = 32MB', 'max_connections = 60', 'wal_level = replica', 'max_wal_senders = 4', ...settings, ''].join('\n'))
}

function cluster (data: string, port: number, dir: string): Cluster {
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`
  const options = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1`
  const self: Cluster = {
    port,
    url,
    query: async (text, values) => {
      const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 })
      client.on('error', () => {})
      await client.connect()
      try {
        return await client.query(text, values)
      } finally {
        await client.end().catch(() => {})
      }
    },
    start: async () => { await runAsync('pg_ctl', ['-D', data, '-l', join(dir, `${port}.log`), '-o', options, '-w', 'start']); running.get(dir)?.add(self) },
    stop: async (mode) => { running.get(dir)?.delete(self); await runAsync('pg_ctl', ['-D', data, '-m', mode, '-w', 'stop']) },
    promote: async () => { await runAsync('pg_ctl', ['-D', data, '-w', 'promote']) }
  }
  return self
}

/**
 * A primary and a streaming standby; with `synchronous`, the standby is synchronous (every commit
 * waits for it: `synchronous_standby_names = '*'`). Resolves once the standby streams.
 */
export async function primaryAndStandby (t: TestContext, { synchronous }: { synchronous: boolean }): Promise<{ primary: Cluster, standby: Cluster }> {
  const dir = folder(t)
  const [primaryData, standbyData] = [join(dir, 'primary'), join(dir, 'standby')]
  initdb(primaryData, [`synchronous_standby_names = '${synchronous ? '*' : ''}'`])
  const primary = cluster(primaryData, await freePort(), dir)
  await primary.start()
  run('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', standbyData, '-R', '-X', 'stream', '--no-sync'])
  const standby = cluster(standbyData, await freePort(), dir)
  await standby.start()
  await waitFor(async () => (await primary.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_replication WHERE state = 'streaming'")).rows[0].n === 1, 'the standby streams')
  return { primary, standby }
}

/** A primary alone, for a test to set as it needs (ALTER SYSTEM). */
export async function primaryAlone (t: TestContext): Promise<Cluster> {
  const dir = folder(t)
  const data = join(dir, 'primary')
  initdb(data, [])
  const primary = cluster(data, await freePort(), dir)
  await primary.start()
  return primary
}

export async function waitFor (check: () => Promise<boolean>, what: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms
  for (;;) {
    if (await check().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`waited ${ms} ms: ${what}`)
    await new Promise(resolve => setTimeout(resolve, 50))
  }
}
