-- Generations (issue 19): every write to a tenant's state (module tables and fleet's
-- name bindings) or to its tokens bumps a counter in the same transaction, whoever
-- writes: this server, another one on the same file, `fleet admin`, or plain SQL. A
-- cache keeps a value with the generation it was read at and reuses it only while one
-- indexed lookup, inside the request's own transaction, finds the same generation.
-- Every tenant has both counters from its creation, so a write's trigger is one
-- UPDATE by primary key (an apply of 10k objects runs 20k of them).
CREATE TABLE generations (
    tenant TEXT NOT NULL REFERENCES tenants (name),
    what TEXT NOT NULL CHECK (what IN ('state', 'tokens')),
    generation INTEGER NOT NULL,
    PRIMARY KEY (tenant, what)
) STRICT, WITHOUT ROWID;

INSERT INTO generations (tenant, what, generation) SELECT name, 'state', 0 FROM tenants;
INSERT INTO generations (tenant, what, generation) SELECT name, 'tokens', 0 FROM tenants;

CREATE TRIGGER tenants_insert_counts_generations AFTER INSERT ON tenants BEGIN
    INSERT INTO generations (tenant, what, generation) VALUES (NEW.name, 'state', 0), (NEW.name, 'tokens', 0);
END;

CREATE TRIGGER sites_insert_bumps_state AFTER INSERT ON sites BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER sites_update_bumps_state AFTER UPDATE ON sites BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER sites_delete_bumps_state AFTER DELETE ON sites BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_insert_bumps_state AFTER INSERT ON accounts BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_update_bumps_state AFTER UPDATE ON accounts BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_delete_bumps_state AFTER DELETE ON accounts BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER pools_insert_bumps_state AFTER INSERT ON pools BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER pools_update_bumps_state AFTER UPDATE ON pools BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER pools_delete_bumps_state AFTER DELETE ON pools BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_insert_bumps_state AFTER INSERT ON quotas BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_update_bumps_state AFTER UPDATE ON quotas BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_delete_bumps_state AFTER DELETE ON quotas BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER offers_insert_bumps_state AFTER INSERT ON offers BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER offers_update_bumps_state AFTER UPDATE ON offers BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER offers_delete_bumps_state AFTER DELETE ON offers BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_insert_bumps_state AFTER INSERT ON flavors BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_update_bumps_state AFTER UPDATE ON flavors BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_delete_bumps_state AFTER DELETE ON flavors BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_insert_bumps_state AFTER INSERT ON fleet_bindings BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_update_bumps_state AFTER UPDATE ON fleet_bindings BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_delete_bumps_state AFTER DELETE ON fleet_bindings BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER tokens_insert_bumps_tokens AFTER INSERT ON tokens BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'tokens';
END;
CREATE TRIGGER tokens_update_bumps_tokens AFTER UPDATE ON tokens BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'tokens';
END;
CREATE TRIGGER tokens_delete_bumps_tokens AFTER DELETE ON tokens BEGIN
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'tokens';
END;
