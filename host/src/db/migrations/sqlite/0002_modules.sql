-- One table per module. Ids are unique per tenant, so one tenant can never learn of
-- another's ids through a collision. Maps are JSON text. References are ids, checked
-- by the module handlers (an archived pool may keep a deleted account's id).

CREATE TABLE sites (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    id TEXT NOT NULL,
    region TEXT NOT NULL,
    description TEXT NOT NULL,
    labels TEXT NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, idempotency_key)
) STRICT;

CREATE TABLE accounts (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    id TEXT NOT NULL,
    provider TEXT NOT NULL,
    credentials_ref TEXT NOT NULL,
    settings TEXT NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, idempotency_key)
) STRICT;

CREATE TABLE pools (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    id TEXT NOT NULL,
    site TEXT NOT NULL,
    account TEXT NOT NULL,
    class TEXT NOT NULL,
    owner TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    labels TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, idempotency_key)
) STRICT;
CREATE INDEX pools_by_account ON pools (tenant, account);

CREATE TABLE quotas (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    owner TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    instances INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, owner)
) STRICT;

CREATE TABLE offers (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    id TEXT NOT NULL,
    pool TEXT NOT NULL,
    to_owner TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, idempotency_key)
) STRICT;

CREATE TABLE flavors (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    id TEXT NOT NULL,
    pool TEXT NOT NULL,
    vcpus INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    gpus INTEGER NOT NULL,
    disk_gib INTEGER NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, idempotency_key)
) STRICT;
