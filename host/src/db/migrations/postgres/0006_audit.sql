-- The audit trail (SPEC §13): one record per successful mutation, in the transaction of
-- the mutation itself.
CREATE TABLE audit (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    at TEXT NOT NULL,
    principal TEXT NOT NULL,
    method TEXT NOT NULL,
    kind TEXT NOT NULL,
    object_id TEXT NOT NULL,
    via TEXT NOT NULL,
    plan_hash TEXT,
    changes TEXT NOT NULL
);
CREATE INDEX audit_by_tenant ON audit (tenant, seq);
CREATE INDEX audit_by_object ON audit (tenant, kind, object_id, seq);

-- When the tenant left convergence, for drift events and status.
ALTER TABLE fleet_drift ADD COLUMN since TEXT;
