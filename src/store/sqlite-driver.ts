// The SQLite binding for the Node in use. better-sqlite3 12 wraps its connections and statements
// in node::ObjectWrap, whose destructor aborts the process on Node 24.19 and later when the
// garbage collector finalizes one outside JavaScript (nodejs/node#65446): at a start, or at any
// moment after a write. better-sqlite3 13 is built on Node-API and does not, but needs Node 22.
// So Node 22 and later load 13, Node 20 loads 12; both have the same API and bundle SQLite.
import { createRequire } from 'node:module'
import type Database from 'better-sqlite3'

const NODE_MAJOR = Number(process.versions.node.split('.')[0])

/** The binding's package: 13 (installed as better-sqlite3-napi) from Node 22 on, else 12. */
export const SQLITE_BINDING = NODE_MAJOR >= 22 ? 'better-sqlite3-napi' : 'better-sqlite3'

const Binding: typeof Database = createRequire(import.meta.url)(SQLITE_BINDING)

/** Opens a connection to the SQLite file at `path`: better-sqlite3's `new Database(path, options)`. */
export function openDatabase (path: string, options?: Database.Options): Database.Database {
  return new Binding(path, options)
}
