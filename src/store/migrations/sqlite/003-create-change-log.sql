-- The change log (SPEC section 9). change_log's one row holds the head: the last position
-- handed out; the write connection bumps it in the transaction of each change, so positions
-- follow commit order. A plant's version is the position of its last change, its ETag; plants
-- stored before the log existed share version 1, the head the log then starts from.
ALTER TABLE plants ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
CREATE TABLE change_log (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  head INTEGER NOT NULL
);
INSERT INTO change_log (id, head) SELECT 1, EXISTS (SELECT 1 FROM plants);
-- One row per change: the plant as the change left it (as it was, for a delete), and the tag it
-- had before, so that a reader of a tag sees a change that removed it. `at` in ms since the epoch.
CREATE TABLE changes (
  position   INTEGER PRIMARY KEY,
  type       TEXT NOT NULL,
  plant_id   INTEGER NOT NULL,
  name       TEXT NOT NULL,
  tag        TEXT,
  tag_before TEXT,
  at         INTEGER NOT NULL
);
