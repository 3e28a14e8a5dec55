-- id is the rowid: lookups and keyset pagination walk the table's own B-tree.
CREATE TABLE plants (
  id   INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  tag  TEXT
);
-- Listing by tag, in id order, without a sort.
CREATE INDEX plants_tag_id ON plants (tag, id) WHERE tag IS NOT NULL;
