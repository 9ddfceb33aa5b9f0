-- When fleet last compared each tenant with its applied document (a drift check or an
-- apply), whatever it found: status says it (SPEC 6.4).
ALTER TABLE fleet_applied ADD COLUMN checked_at TEXT;
