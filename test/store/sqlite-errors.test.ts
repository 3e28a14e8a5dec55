import assert from 'node:assert/strict'
import type Database from 'better-sqlite3'
import { openDatabase } from '../../src/store/sqlite-driver.js'
import { join } from 'node:path'
import { test } from 'node:test'
import { isBusy, isUnavailable } from '../../src/store/sqlite-errors.js'
import { tempDir } from '../helpers.js'

/** The error a statement throws on a real SQLite database, set up by `arrange`. */
function errorFrom (t: Parameters<typeof tempDir>[0], arrange: (db: Database.Database) => void, statement: string): unknown {
  const db = openDatabase(join(tempDir(t), 'e.db'))
  t.after(() => db.close())
  db.exec('CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL)')
  arrange(db)
  try {
    db.exec(statement)
  } catch (error) {
    return error
  }
  throw new Error(`${statement} did not fail`)
}

test('a full disk and a read-only database are storage trouble (503), as SQLite reports them', (t) => {
  const full = errorFrom(t, db => db.pragma('max_page_count = 2'), 'INSERT INTO plants (name) SELECT printf(\'%.5000c\', \'x\') FROM (SELECT 1 UNION SELECT 2 UNION SELECT 3)')
  assert.match(String((full as { code: string }).code), /^SQLITE_FULL/)
  assert.equal(isUnavailable(full), true)
  const readOnly = errorFrom(t, db => db.pragma('query_only = ON'), "INSERT INTO plants (name) VALUES ('x')")
  assert.match(String((readOnly as { code: string }).code), /^SQLITE_READONLY/)
  assert.equal(isUnavailable(readOnly), true)
})

test('a lock held by another connection is storage trouble and busy', (t) => {
  const path = join(tempDir(t), 'locked.db')
  const holder = openDatabase(path)
  const other = openDatabase(path)
  t.after(() => { other.close(); holder.close() })
  holder.exec('CREATE TABLE plants (id INTEGER PRIMARY KEY); BEGIN IMMEDIATE')
  other.pragma('busy_timeout = 0')
  const busy = (() => { try { other.exec('BEGIN IMMEDIATE') } catch (error) { return error } })()
  assert.equal(isBusy(busy), true)
  assert.equal(isUnavailable(busy), true)
})

test('what a client or a bug causes is not storage trouble (500 if it ever escapes)', (t) => {
  const constraint = errorFrom(t, () => {}, 'INSERT INTO plants (id, name) VALUES (1, NULL)')
  assert.equal(isUnavailable(constraint), false)
  const syntax = errorFrom(t, () => {}, 'INSERT INTO nowhere VALUES (1)')
  assert.equal(isUnavailable(syntax), false)
  assert.equal(isUnavailable(new TypeError('x is undefined')), false)
  assert.equal(isUnavailable(null), false)
  assert.equal(isBusy(constraint), false)
})
