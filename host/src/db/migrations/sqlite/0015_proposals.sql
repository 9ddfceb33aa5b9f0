-- Proposals (issue 52, SPEC §17): a document planned by its author and kept with that
-- plan, byte for byte, until other principals review it and someone applies exactly
-- it. Numbered per tenant; written under the tenant's write lock, so numbers never
-- collide.
CREATE TABLE proposals (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    number INTEGER NOT NULL,
    title TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('open', 'applied', 'rejected', 'withdrawn', 'stale')),
    author TEXT NOT NULL,
    created_at TEXT NOT NULL,
    plan_hash TEXT NOT NULL,
    prune INTEGER NOT NULL,
    -- The plan's summary, JSON.
    summary TEXT NOT NULL,
    -- The document as it was sent, and the planner's answer to it as it was written.
    document TEXT NOT NULL,
    plan TEXT NOT NULL,
    -- Whether it was approved when it was last judged (at its creation and at every
    -- review); an apply judges it again.
    approved INTEGER NOT NULL DEFAULT 0,
    -- The revision its apply made.
    revision INTEGER,
    PRIMARY KEY (tenant, number)
) STRICT;

-- One review per principal and proposal: a later one replaces the earlier.
CREATE TABLE proposal_reviews (
    tenant TEXT NOT NULL,
    number INTEGER NOT NULL,
    principal TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('approve', 'reject')),
    comment TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (tenant, number, principal),
    FOREIGN KEY (tenant, number) REFERENCES proposals (tenant, number)
) STRICT;

-- The proposal a revision's apply applied (SPEC §17: history entries name it).
ALTER TABLE fleet_revisions ADD COLUMN proposal INTEGER;
