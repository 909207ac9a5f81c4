-- PostgreSQL dialect of migrations/0011_governance.sql.
CREATE TABLE master_keys (
    fingerprint    TEXT PRIMARY KEY,
    generation     BIGINT NOT NULL UNIQUE,
    state          TEXT NOT NULL,           -- current | previous | retired
    created_at_ms  BIGINT NOT NULL,
    retired_at_ms  BIGINT
);

CREATE TABLE tenant_keks (
    tenant         TEXT PRIMARY KEY,
    kek            TEXT,
    created_at_ms  BIGINT NOT NULL,
    erased_at_ms   BIGINT
);

ALTER TABLE tenants ADD COLUMN erased_at_ms BIGINT;    -- NULL: not erased
ALTER TABLE tenants ADD COLUMN regions TEXT;           -- comma-separated; NULL: any region
