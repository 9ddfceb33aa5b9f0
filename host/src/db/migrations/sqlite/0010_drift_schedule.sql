-- Drift checks claimed per tenant (SPEC §12, issue 26), so that replicas share them:
-- `due_at` is when the tenant's next check falls due, in milliseconds since the Unix
-- epoch; `holder` names the replica that last claimed it, and `claimed_until` says
-- until when that claim holds while its check is in flight (NULL once it is done): a
-- replica that dies holds its claims no longer than that. It replaces the one lease
-- under which a single replica ran every check. Tenants that applied a document before
-- fall due at once.
CREATE TABLE drift_schedule (
    tenant TEXT PRIMARY KEY REFERENCES tenants (name),
    due_at INTEGER NOT NULL,
    holder TEXT,
    claimed_until INTEGER
) STRICT;
CREATE INDEX drift_schedule_by_due ON drift_schedule (due_at);
INSERT INTO drift_schedule (tenant, due_at) SELECT tenant, 0 FROM fleet_applied;
DELETE FROM leases WHERE name = 'fleet.drift';
