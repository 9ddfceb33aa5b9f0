-- Issue 62 (hardening): an outbox with a backlog costs nothing while nothing is due.
-- A claim passes over the tenants with an attempt in flight; they are found through
-- this index of the claimed pending deliveries alone, not by reading each tenant's
-- whole outbox once for every due delivery.
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (claimed_until_ms, tenant)
    WHERE state = 'pending';

-- The event's `webhook-id` (SPEC §18): made at random when the event is, stored with
-- it, so that a restore of an older backup or another deployment never sends an id a
-- receiver has seen with another body. Events from before have none.
ALTER TABLE events ADD COLUMN webhook_id TEXT;

-- The revision a rollback put back (`fleet rollback N`), kept on the revision it made.
ALTER TABLE fleet_revisions ADD COLUMN rollback_of BIGINT;

-- The last heal of the applied revision (when, and its calls), for `fleet status`.
ALTER TABLE fleet_applied ADD COLUMN healed_at TEXT;
ALTER TABLE fleet_applied ADD COLUMN healed_calls BIGINT;

-- The audit trail names objects beside their ids: a binding found by its id.
CREATE INDEX fleet_bindings_by_id ON fleet_bindings (tenant, id);
