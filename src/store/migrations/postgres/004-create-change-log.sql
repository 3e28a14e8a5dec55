-- The change log (SPEC section 9). change_log's one row holds the head: the last position
-- handed out. Each change takes the next position by updating that row as the last statement
-- before its COMMIT, so the row's lock makes changes commit one at a time in position order:
-- a reader never finds a position filled in after it read past it (docs/design.md). A plant's
-- version is the position of its last change, its ETag; plants stored before the log existed
-- share version 1, the head the log then starts from.
ALTER TABLE plants ADD COLUMN version bigint NOT NULL DEFAULT 1;
CREATE TABLE change_log (
  id   boolean PRIMARY KEY DEFAULT true CHECK (id),
  head bigint NOT NULL
);
INSERT INTO change_log (head) SELECT CASE WHEN EXISTS (SELECT 1 FROM plants) THEN 1 ELSE 0 END;
-- One row per change: the plant as the change left it (as it was, for a delete), and the tag it
-- had before, so that a reader of a tag sees a change that removed it.
CREATE TABLE changes (
  position   bigint PRIMARY KEY,
  type       text NOT NULL,
  plant_id   bigint NOT NULL,
  name       text NOT NULL,
  tag        text,
  tag_before text,
  at         timestamptz NOT NULL DEFAULT now()
);
