-- The rate limit's counts, shared by the instances on this database: each instance's own count of
-- a token's requests in a one-minute window (window_start in ms since the epoch). A sync sets its
-- own rows only, so instances never contend for a row. The key leads with the token: a sync reads
-- one token's recent windows as one index range; the windows deleted as they age are few.
CREATE TABLE rate_windows (
  token_id     bigint NOT NULL,
  window_start bigint NOT NULL,
  instance_id  text   NOT NULL,
  requests     bigint NOT NULL,
  PRIMARY KEY (token_id, window_start, instance_id)
);
