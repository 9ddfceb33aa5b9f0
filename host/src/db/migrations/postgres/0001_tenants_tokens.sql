CREATE TABLE tenants (
    name TEXT PRIMARY KEY,
    created_at TEXT NOT NULL
);

-- Only the SHA-256 of a token is kept; the token itself is shown once.
CREATE TABLE tokens (
    token_hash TEXT PRIMARY KEY,
    tenant TEXT NOT NULL REFERENCES tenants (name),
    principal TEXT NOT NULL,
    grants TEXT NOT NULL,
    created_at TEXT NOT NULL
);
