import pg from 'pg'

/** Runs one statement (or several, without values) on a connection of its own to `url`, then closes it. */
export async function queryOnce (url: string, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await client.query(text, values)
  } finally {
    await client.end()
  }
}
