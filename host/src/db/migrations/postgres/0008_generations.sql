-- Generations (issue 19): every write to a tenant's state (module tables and fleet's
-- name bindings) or to its tokens bumps a counter in the same transaction, whoever
-- writes: any replica, `fleet admin`, or plain SQL. A cache keeps a value with the
-- generation it was read at and reuses it only while one indexed lookup, inside the
-- request's own transaction, finds the same generation: so a replica never serves
-- what another replica changed (a revoked token, an object).
CREATE TABLE generations (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    what TEXT NOT NULL CHECK (what IN ('state', 'tokens')),
    generation BIGINT NOT NULL,
    PRIMARY KEY (tenant, what)
);

INSERT INTO generations (tenant, what, generation) SELECT name, 'state', 0 FROM tenants;
INSERT INTO generations (tenant, what, generation) SELECT name, 'tokens', 0 FROM tenants;

CREATE FUNCTION fleet_count_generations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO generations (tenant, what, generation) VALUES (NEW.name, 'state', 0), (NEW.name, 'tokens', 0);
    RETURN NULL;
END $$;
CREATE TRIGGER tenants_insert_counts_generations AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION fleet_count_generations();

-- The trigger's argument names the counter: 'state' or 'tokens'. A transaction bumps
-- each of its tenant's counters once, at its first write (a transaction-local setting
-- remembers it): its writes and the bump commit together, which is all a cache needs,
-- and PostgreSQL slows down on every further update of one row in one transaction (an
-- apply of 10k objects would make 20k versions of it).
CREATE FUNCTION fleet_bump_generation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    row_tenant TEXT;
    bumped TEXT;
BEGIN
    IF TG_OP = 'DELETE' THEN row_tenant := OLD.tenant; ELSE row_tenant := NEW.tenant; END IF;
    bumped := 'fleet.bumped_' || md5(row_tenant || '/' || TG_ARGV[0]);
    IF coalesce(current_setting(bumped, true), '') <> 'yes' THEN
        UPDATE generations SET generation = generation + 1 WHERE tenant = row_tenant AND what = TG_ARGV[0];
        PERFORM set_config(bumped, 'yes', true);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER sites_bumps_state AFTER INSERT OR UPDATE OR DELETE ON sites
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER accounts_bumps_state AFTER INSERT OR UPDATE OR DELETE ON accounts
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER pools_bumps_state AFTER INSERT OR UPDATE OR DELETE ON pools
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER quotas_bumps_state AFTER INSERT OR UPDATE OR DELETE ON quotas
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER offers_bumps_state AFTER INSERT OR UPDATE OR DELETE ON offers
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER flavors_bumps_state AFTER INSERT OR UPDATE OR DELETE ON flavors
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER fleet_bindings_bumps_state AFTER INSERT OR UPDATE OR DELETE ON fleet_bindings
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('state');
CREATE TRIGGER tokens_bumps_tokens AFTER INSERT OR UPDATE OR DELETE ON tokens
    FOR EACH ROW EXECUTE FUNCTION fleet_bump_generation('tokens');
