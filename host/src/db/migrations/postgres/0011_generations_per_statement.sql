-- Generations are counted once per statement rather than once per row (issue 26): the
-- per-row trigger of 0008 ran its PL/pgSQL for every row written, about 9 µs a row, a
-- third of what a 10k apply spent in PostgreSQL. A statement-level trigger sees the
-- rows of its statement in a transition table and bumps each of their tenants'
-- counters once per transaction, as before. Transition tables take one event a
-- trigger, so each table gets three. (fleet_bump_generation stays, unused, for a
-- replica of the release before that makes a plugin's table while the others upgrade.)
CREATE FUNCTION fleet_bump_generations() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    row_tenant TEXT;
    bumped TEXT;
BEGIN
    FOR row_tenant IN SELECT DISTINCT tenant FROM changed LOOP
        bumped := 'fleet.bumped_' || md5(row_tenant || '/' || TG_ARGV[0]);
        IF coalesce(current_setting(bumped, true), '') <> 'yes' THEN
            UPDATE generations SET generation = generation + 1 WHERE tenant = row_tenant AND what = TG_ARGV[0];
            PERFORM set_config(bumped, 'yes', true);
        END IF;
    END LOOP;
    RETURN NULL;
END $$;

-- Every table the row-level trigger counted, plugins' tables too, gets the statement
-- triggers of the same counter.
DO $$
DECLARE
    counted RECORD;
BEGIN
    FOR counted IN
        SELECT trigger.tgname::text AS name, trigger.tgrelid::regclass AS tab,
               CASE WHEN trigger.tgrelid = 'tokens'::regclass THEN 'tokens' ELSE 'state' END AS what
        FROM pg_trigger trigger JOIN pg_proc function ON function.oid = trigger.tgfoid
        WHERE function.proname = 'fleet_bump_generation' AND NOT trigger.tgisinternal
    LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', counted.name, counted.tab);
        EXECUTE format('CREATE TRIGGER %I AFTER INSERT ON %s REFERENCING NEW TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations(%L)',
                       counted.name || '_insert', counted.tab, counted.what);
        EXECUTE format('CREATE TRIGGER %I AFTER UPDATE ON %s REFERENCING NEW TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations(%L)',
                       counted.name || '_update', counted.tab, counted.what);
        EXECUTE format('CREATE TRIGGER %I AFTER DELETE ON %s REFERENCING OLD TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION fleet_bump_generations(%L)',
                       counted.name || '_delete', counted.tab, counted.what);
    END LOOP;
END $$;
