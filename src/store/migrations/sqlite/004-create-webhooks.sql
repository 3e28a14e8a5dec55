-- Webhook subscriptions and their deliveries (SPEC section 5). Deliveries come out of the change
-- log: `cursor` is the position up to which a subscription's changes have been made deliveries.
-- Times are ms since the epoch; `previous_secret` signs too until `previous_until`.
CREATE TABLE webhooks (
  id              INTEGER PRIMARY KEY,
  url             TEXT NOT NULL,
  events          TEXT NOT NULL,
  tag             TEXT,
  secret          TEXT NOT NULL,
  previous_secret TEXT,
  previous_until  INTEGER,
  cursor          INTEGER NOT NULL,
  failing_since   INTEGER,
  disabled_at     INTEGER,
  disabled_reason TEXT,
  created_at      INTEGER NOT NULL
);
-- One delivery: a change (its plant as the change left it) for one subscription. `next_at` is
-- when it is due; `lease_until` keeps other senders off it while one attempts it.
CREATE TABLE webhook_deliveries (
  id          INTEGER PRIMARY KEY,
  webhook_id  INTEGER NOT NULL REFERENCES webhooks ON DELETE CASCADE,
  position    INTEGER NOT NULL,
  type        TEXT NOT NULL,
  plant_id    INTEGER NOT NULL,
  name        TEXT NOT NULL,
  tag         TEXT,
  status      TEXT NOT NULL,
  attempts    INTEGER NOT NULL DEFAULT 0,
  next_at     INTEGER NOT NULL,
  lease_until INTEGER NOT NULL DEFAULT 0,
  created_at  INTEGER NOT NULL
);
-- A subscription's due deliveries, and those leased now, found without reading the rest.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (webhook_id, next_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id, lease_until) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, id);
CREATE TABLE webhook_attempts (
  delivery_id INTEGER NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
  at          INTEGER NOT NULL,
  status_code INTEGER,
  error       TEXT,
  duration_ms INTEGER NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id);
