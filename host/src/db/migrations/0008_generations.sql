-- Generations (issue 19): every write to a tenant's state (module tables and fleet's
-- name bindings) or to its tokens bumps a counter in the same transaction, whoever
-- writes: this server, another one on the same file, `fleet admin`, or plain SQL. A
-- cache keeps a value with the generation it was read at and reuses it only while one
-- indexed lookup, inside the request's own transaction, finds the same generation.
-- (No INSERT OR IGNORE in the triggers: an outer statement's conflict handling, such as
-- the storage layer's upsert, overrides a trigger's.)
CREATE TABLE generations (
    tenant TEXT NOT NULL,
    what TEXT NOT NULL CHECK (what IN ('state', 'tokens')),
    generation INTEGER NOT NULL,
    PRIMARY KEY (tenant, what)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER sites_insert_bumps_state AFTER INSERT ON sites BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER sites_update_bumps_state AFTER UPDATE ON sites BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER sites_delete_bumps_state AFTER DELETE ON sites BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_insert_bumps_state AFTER INSERT ON accounts BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_update_bumps_state AFTER UPDATE ON accounts BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER accounts_delete_bumps_state AFTER DELETE ON accounts BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER pools_insert_bumps_state AFTER INSERT ON pools BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER pools_update_bumps_state AFTER UPDATE ON pools BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER pools_delete_bumps_state AFTER DELETE ON pools BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_insert_bumps_state AFTER INSERT ON quotas BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_update_bumps_state AFTER UPDATE ON quotas BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER quotas_delete_bumps_state AFTER DELETE ON quotas BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER offers_insert_bumps_state AFTER INSERT ON offers BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER offers_update_bumps_state AFTER UPDATE ON offers BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER offers_delete_bumps_state AFTER DELETE ON offers BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_insert_bumps_state AFTER INSERT ON flavors BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_update_bumps_state AFTER UPDATE ON flavors BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER flavors_delete_bumps_state AFTER DELETE ON flavors BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_insert_bumps_state AFTER INSERT ON fleet_bindings BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_update_bumps_state AFTER UPDATE ON fleet_bindings BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'state';
END;
CREATE TRIGGER fleet_bindings_delete_bumps_state AFTER DELETE ON fleet_bindings BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'state', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'state');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'state';
END;
CREATE TRIGGER tokens_insert_bumps_tokens AFTER INSERT ON tokens BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'tokens', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'tokens');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'tokens';
END;
CREATE TRIGGER tokens_update_bumps_tokens AFTER UPDATE ON tokens BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT NEW.tenant, 'tokens', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = NEW.tenant AND what = 'tokens');
    UPDATE generations SET generation = generation + 1 WHERE tenant = NEW.tenant AND what = 'tokens';
END;
CREATE TRIGGER tokens_delete_bumps_tokens AFTER DELETE ON tokens BEGIN
    INSERT INTO generations (tenant, what, generation) SELECT OLD.tenant, 'tokens', 0
        WHERE NOT EXISTS (SELECT 1 FROM generations WHERE tenant = OLD.tenant AND what = 'tokens');
    UPDATE generations SET generation = generation + 1 WHERE tenant = OLD.tenant AND what = 'tokens';
END;
