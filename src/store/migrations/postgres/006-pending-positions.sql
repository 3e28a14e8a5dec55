-- Each subscription's oldest pending delivery, found by a seek: the change log keeps every change
-- from it on (SPEC section 9: as long as a delivery still needs them), and pruning asks at every
-- batch, which must not read every pending delivery of a long backlog.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (webhook_id, position) WHERE status = 'pending';
