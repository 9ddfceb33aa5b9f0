-- Every apply's document, kept as the tenant's next revision (issue 27, SPEC §15).
-- `fleet_applied` stays the tenant's current row (status and fleet.drift read it) and
-- names the revision it holds; the revision is written in the apply's transaction,
-- under the tenant's write lock, so revision numbers never collide.
CREATE TABLE fleet_revisions (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    revision INTEGER NOT NULL,
    document TEXT NOT NULL,
    prune INTEGER NOT NULL,
    plan_hash TEXT NOT NULL,
    applied_by TEXT NOT NULL,
    applied_at TEXT NOT NULL,
    calls INTEGER NOT NULL,
    -- The overrides that let the apply's denials through: a JSON array of
    -- {"policy", "reason"}.
    overrides TEXT NOT NULL,
    PRIMARY KEY (tenant, revision)
) STRICT;

-- What a database already holds: the document applied last becomes revision 1.
INSERT INTO fleet_revisions (tenant, revision, document, prune, plan_hash, applied_by, applied_at, calls, overrides)
SELECT tenant, 1, document, prune, plan_hash, applied_by, applied_at, calls, '[]' FROM fleet_applied;

ALTER TABLE fleet_applied ADD COLUMN revision INTEGER NOT NULL DEFAULT 1;

-- Self-heal (SPEC §15): the id of the token whose apply asked fleet.drift to restore
-- its revision when a check finds drift; none when the revision does not heal.
ALTER TABLE fleet_applied ADD COLUMN heal_token TEXT;
