-- Only the SHA-256 digest of each secret is kept: a dump of this table holds no usable token.
CREATE TABLE tokens (
  id         INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  digest     BLOB NOT NULL UNIQUE,
  scopes     TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER,
  revoked_at INTEGER
);
-- A name picks one active token, so `tokens revoke NAME` is unambiguous.
CREATE UNIQUE INDEX tokens_active_name ON tokens (name) WHERE revoked_at IS NULL;
