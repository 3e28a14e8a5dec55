import { settings } from '../config.js'

/** `--port` and the rest: one `serve` flag per setting, named after its environment variable. */
export const flagOf = (env: string): string => env.toLowerCase().replaceAll('_', '-')

const DATABASE = `  --database-url URL   the store: a SQLite file path or a postgres:// URL (default: DATABASE_URL, else ./data/plantstore.db)
  -h, --help           this text`

/** The help text of each command and subcommand, printed on stdout by `--help`. */
export const USAGE = {
  plantstore: `Usage: plantstore COMMAND [flags]

The plant store HTTP service, and the commands that look after its store.

Commands:
  serve                 run the HTTP service (the default when no command is given)
  migrate               create the store, or upgrade its schema, and exit
  tokens create|list|revoke
                        manage the bearer tokens that clients send
  backup FILE           write a consistent copy of a live SQLite store to FILE
  export                write every plant to stdout as NDJSON, from one snapshot
  import [--replace]    read an export from stdin into an empty store (all or nothing)

Every command takes --database-url URL (or the environment's DATABASE_URL) and --help.
  plantstore --version  print the version and exit`,

  serve: `Usage: plantstore serve [flags]

Runs the HTTP service. Each flag overrides its environment variable:
${settings.map(s => `  --${flagOf(s.env)} VALUE`.padEnd(34) + s.env).join('\n')}
  -h, --help                      this text

On a store without any token, the first start creates one with every scope and prints it once.
--workers N (1 to 64; PostgreSQL only above 1) runs N server processes that share the port, and
replaces one that dies; SIGTERM stops them all.`,

  migrate: `Usage: plantstore migrate [flags]

Creates the store if there is none, brings its schema up to date, and exits.
${DATABASE}`,

  tokens: `Usage: plantstore tokens create|list|revoke [flags]

  plantstore tokens create --name NAME [--scope S]... [--expires-in 30d]
  plantstore tokens list
  plantstore tokens revoke NAME_OR_ID

Each subcommand takes --database-url URL and --help. A store that does not exist yet is
created (and said so on stderr).`,

  'tokens create': `Usage: plantstore tokens create --name NAME [--scope S]... [--expires-in 30d] [flags]

Creates a token and prints it alone on stdout, once: TOKEN=$(plantstore tokens create --name ci)
  --name NAME          1 to 64 letters, digits, dots, hyphens or underscores, not all digits;
                       unique among active tokens (an expired or revoked token frees its name)
  --scope S            plants:read, plants:write or admin; repeat for several
                       (default: plants:read and plants:write)
  --expires-in TIME    a number and a unit, s m h d or w (30d, 12h, 2w); at most 10 years
                       (3653d); default: never expires
${DATABASE}`,

  'tokens list': `Usage: plantstore tokens list [flags]

Lists every token, one a line, never its secret. Tab-separated columns:
  id, name, scopes (comma-separated), state (active, expired TIME or revoked TIME),
  created TIME, expires TIME or never expires. TIME is ISO 8601 in UTC.
${DATABASE}`,

  'tokens revoke': `Usage: plantstore tokens revoke NAME_OR_ID [flags]

Revokes the active token with this name, or the token with this id. It returns once no
running server accepts the token any more.
${DATABASE}`,

  backup: `Usage: plantstore backup FILE [flags]

Writes a consistent copy of the SQLite store to FILE while the server keeps running (SQLite's
online backup). FILE is a self-contained database (no -wal file), readable by its owner only;
an existing FILE is never overwritten. For PostgreSQL, use pg_dump.
${DATABASE}`,

  export: `Usage: plantstore export [flags] > plants.ndjson

Writes every plant to stdout, one JSON object a line, in id order: {"id":…,"name":…,"tag":…}
(no "tag" when the plant has none; ids exact, as JSON integers). Tokens are not exported. All
lines come from one snapshot, taken as the export starts, while servers go on writing. If it
fails, its last line says so and is not JSON, so that an import of its output fails too.
Moving a store: plantstore export | plantstore import --database-url TARGET
${DATABASE}`,

  import: `Usage: plantstore import [--replace] [flags] < plants.ndjson

Reads plants from stdin, one JSON object a line as export writes them, and stores them all in
one transaction, or none: the first bad line stops the import, naming the line, and nothing is
stored. Each line is checked as POST /plants checks a body, and may hold only id, name and tag.
Blank lines are skipped; a line repeating an earlier plant exactly is stored once. While it
runs, other writes to the store wait (servers answer them 503).
  --replace            the store may hold plants: delete them first, in the same transaction
                       (tokens stay); without it, a store with plants is refused
${DATABASE}`
}
