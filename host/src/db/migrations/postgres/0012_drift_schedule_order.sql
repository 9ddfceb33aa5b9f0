-- Claims take the due tenants in the order (due_at, tenant): an index in that order
-- hands a claim its first few at once, where the index on due_at alone made every
-- claim sort all the tenants due at one time (all of them, after a migration or an
-- outage).
DROP INDEX drift_schedule_by_due;
CREATE INDEX drift_schedule_by_due ON drift_schedule (due_at, tenant);
