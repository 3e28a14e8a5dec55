-- A webhook subscription's id is never given again: a client holding the id of a deleted
-- subscription must not reach (or delete) a newer one. INTEGER PRIMARY KEY alone takes
-- max(id) + 1, the id of the newest subscription again once it is deleted; AUTOINCREMENT would
-- mean rebuilding the table, and its deliveries' foreign keys with it. So the last id given is
-- kept here, and each new subscription takes the next (PostgreSQL's identity never repeats).
CREATE TABLE webhook_ids (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  last INTEGER NOT NULL
);
INSERT INTO webhook_ids (id, last) SELECT 1, coalesce(max(id), 0) FROM webhooks;
