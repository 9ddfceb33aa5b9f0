-- Git sources (SPEC §20.3): a tenant's one source, what its cycle last found, and when
-- it is due next and which replica holds that cycle (claimed as drift checks are,
-- docs/decisions/0014); and the inbound hook's delivery ids seen in the last day.
CREATE TABLE sources (
    tenant TEXT PRIMARY KEY REFERENCES tenants (name),
    -- The inbound hook's id, `/hooks/sources/<id>`: random, and new on every put.
    id TEXT NOT NULL UNIQUE,
    url TEXT NOT NULL,
    branch TEXT NOT NULL,
    path TEXT NOT NULL,
    mode TEXT NOT NULL CHECK (mode IN ('observe', 'propose', 'auto')),
    prune BIGINT NOT NULL,
    heal BIGINT NOT NULL,
    interval_ms BIGINT NOT NULL,
    -- `{"username"?, "token"}` as JSON, sealed at rest when the deployment has a key.
    credential TEXT,
    -- The allowed signers' OpenSSH public key lines, as a JSON array.
    signers TEXT NOT NULL,
    -- The inbound hook's secret, sealed at rest when the deployment has a key.
    hook_secret TEXT NOT NULL,
    pinned TEXT,
    -- The token that put the source (its id): the cycle acts with its authority.
    token TEXT NOT NULL,
    principal TEXT NOT NULL,
    -- What the last cycle found (Source.status).
    state TEXT NOT NULL,
    head_commit TEXT,
    -- The head the last cycle came to an end with: the same head again is nothing to
    -- do (a cycle that failed on the way, or must try again, leaves it).
    settled_commit TEXT,
    fetched_at TEXT,
    applied_commit TEXT,
    applied_revision BIGINT,
    -- The object id of the document (blob or tree) at the applied commit: the same id
    -- at a new head is the same document.
    applied_document TEXT,
    changed_in TEXT,
    proposal BIGINT,
    last_attempt TEXT,
    error TEXT,
    -- Milliseconds since the epoch: when the next cycle is due, and until when a
    -- replica holds the one it runs.
    due_ms BIGINT NOT NULL,
    holder TEXT,
    claimed_until_ms BIGINT,
    updated_at TEXT NOT NULL
);
CREATE INDEX sources_due ON sources (due_ms);

CREATE TABLE source_hook_deliveries (
    id TEXT NOT NULL,
    delivery TEXT NOT NULL,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (id, delivery)
);

-- A proposal a source's cycle opened: the policies' `input.source` it was planned with
-- (JSON), so that its reviews and its apply judge it as it was planned.
ALTER TABLE proposals ADD COLUMN git_source TEXT;
