-- Tenant policies (issue 31, SPEC §14): Rego modules that judge every plan. The state
-- the planner reads carries them, so a write bumps the tenant's state generation and
-- no cached state outlives the policies it was read with.
CREATE TABLE policies (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    name TEXT NOT NULL,
    level TEXT NOT NULL CHECK (level IN ('advisory', 'mandatory', 'enforced')),
    source TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER policies_insert_bumps_state AFTER INSERT ON policies BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER policies_update_bumps_state AFTER UPDATE ON policies BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER policies_delete_bumps_state AFTER DELETE ON policies BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
