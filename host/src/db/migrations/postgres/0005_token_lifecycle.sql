-- Tokens get an id to name them by (never the secret), an optional expiry, and a
-- revocation time (SPEC §9). The id derives from the stored hash, so existing tokens
-- get theirs here.
ALTER TABLE tokens ADD COLUMN id TEXT;
ALTER TABLE tokens ADD COLUMN expires_at TEXT;
ALTER TABLE tokens ADD COLUMN revoked_at TEXT;
UPDATE tokens SET id = 'tok_' || substr(token_hash, 1, 16);
CREATE UNIQUE INDEX tokens_by_id ON tokens (id);
CREATE INDEX tokens_by_tenant ON tokens (tenant, created_at);
