-- Webhook subscriptions and their deliveries (SPEC section 5). Deliveries come out of the change
-- log: `cursor` is the position up to which a subscription's changes have been made deliveries.
-- `previous_secret` signs too until `previous_until`.
CREATE TABLE webhooks (
  id              bigserial PRIMARY KEY,
  url             text NOT NULL,
  events          text NOT NULL,
  tag             text,
  secret          text NOT NULL,
  previous_secret text,
  previous_until  timestamptz,
  cursor          bigint NOT NULL,
  failing_since   timestamptz,
  disabled_at     timestamptz,
  disabled_reason text,
  created_at      timestamptz NOT NULL
);
-- One delivery: a change (its plant as the change left it) for one subscription. `next_at` is
-- when it is due; `lease_until` keeps other instances off it while one attempts it.
CREATE TABLE webhook_deliveries (
  id          bigserial PRIMARY KEY,
  webhook_id  bigint NOT NULL REFERENCES webhooks ON DELETE CASCADE,
  position    bigint NOT NULL,
  type        text NOT NULL,
  plant_id    bigint NOT NULL,
  name        text NOT NULL,
  tag         text,
  status      text NOT NULL,
  attempts    integer NOT NULL DEFAULT 0,
  next_at     timestamptz NOT NULL,
  lease_until timestamptz NOT NULL DEFAULT '-infinity',
  created_at  timestamptz NOT NULL
);
-- A subscription's due deliveries, and those leased now, found without reading the rest.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (webhook_id, next_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id, lease_until) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log ON webhook_deliveries (webhook_id, id);
CREATE TABLE webhook_attempts (
  delivery_id bigint NOT NULL REFERENCES webhook_deliveries ON DELETE CASCADE,
  at          timestamptz NOT NULL,
  status_code integer,
  error       text,
  duration_ms integer NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id);
