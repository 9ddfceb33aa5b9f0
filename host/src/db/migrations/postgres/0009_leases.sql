-- Leases (SPEC §12): work that one server of several on this database does at a time,
-- such as the fleet.drift reconciler's next check. `due_at` is when the work may next
-- be claimed, in milliseconds since the Unix epoch; `holder` names the server that last
-- claimed it.
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    due_at BIGINT NOT NULL
);
