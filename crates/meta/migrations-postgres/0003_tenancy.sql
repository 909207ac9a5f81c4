-- PostgreSQL dialect of migrations/0003_tenancy.sql: tenants, API tokens
-- (stored as hashes only) and sealed tenant secrets.
CREATE TABLE tenants (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL
);

CREATE TABLE api_tokens (
    id             TEXT PRIMARY KEY,
    tenant         TEXT REFERENCES tenants (id),
    name           TEXT NOT NULL,
    hash           TEXT NOT NULL UNIQUE,
    is_admin       BIGINT NOT NULL DEFAULT 0,
    created_at_ms  BIGINT NOT NULL,
    revoked_at_ms  BIGINT
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant);

CREATE TABLE secrets (
    tenant         TEXT NOT NULL REFERENCES tenants (id),
    name           TEXT NOT NULL,
    sealed         BYTEA NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);
