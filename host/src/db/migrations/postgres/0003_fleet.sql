-- Names fleet gave the objects it created: (tenant, kind, name) -> id.
CREATE TABLE fleet_bindings (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    id TEXT NOT NULL,
    PRIMARY KEY (tenant, kind, name)
);

-- The last document each tenant applied, which status and fleet.drift compare against.
CREATE TABLE fleet_applied (
    tenant TEXT PRIMARY KEY REFERENCES tenants (name),
    document TEXT NOT NULL,
    prune BIGINT NOT NULL,
    plan_hash TEXT NOT NULL,
    applied_by TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    calls BIGINT NOT NULL
);

-- The result of the last drift check; a row only while the tenant has drifted.
CREATE TABLE fleet_drift (
    tenant TEXT PRIMARY KEY REFERENCES tenants (name),
    checked_at TEXT NOT NULL,
    plan_hash TEXT NOT NULL,
    summary TEXT NOT NULL,
    changes TEXT NOT NULL
);

CREATE TABLE events (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    type TEXT NOT NULL,
    at TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX events_by_tenant ON events (tenant, seq);
