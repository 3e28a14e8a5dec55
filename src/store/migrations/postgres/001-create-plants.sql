-- Ids are int8, exact as bigint in the store; the primary key's B-tree serves lookups and keyset pages.
CREATE TABLE plants (
  id   bigint PRIMARY KEY,
  name text NOT NULL,
  tag  text
);
-- Listing by tag, in id order, without a sort.
CREATE INDEX plants_tag_id ON plants (tag, id) WHERE tag IS NOT NULL;
