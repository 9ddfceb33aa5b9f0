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
);

CREATE TRIGGER policies_bumps_state_insert AFTER INSERT ON policies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations('state');
CREATE TRIGGER policies_bumps_state_update AFTER UPDATE ON policies REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations('state');
CREATE TRIGGER policies_bumps_state_delete AFTER DELETE ON policies REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations('state');
