-- Tenants, API tokens and tenant secrets. Plain, portable SQL: TEXT/INTEGER/BLOB
-- columns, timestamps as milliseconds since the epoch.
CREATE TABLE tenants (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

-- A token is shown once; only its hash (blake3, hex) is stored. Admin tokens
-- have no tenant and may only use the admin routes.
CREATE TABLE api_tokens (
    id             TEXT PRIMARY KEY,
    tenant         TEXT REFERENCES tenants (id),
    name           TEXT NOT NULL,
    hash           TEXT NOT NULL UNIQUE,
    is_admin       INTEGER NOT NULL DEFAULT 0,
    created_at_ms  INTEGER NOT NULL,
    revoked_at_ms  INTEGER
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant);

-- Secret values are sealed (XChaCha20-Poly1305 under a key derived from the
-- master key, bound to tenant and name) before they reach this table.
CREATE TABLE secrets (
    tenant         TEXT NOT NULL REFERENCES tenants (id),
    name           TEXT NOT NULL,
    sealed         BLOB NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
);
