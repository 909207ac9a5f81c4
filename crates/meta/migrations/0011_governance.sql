-- Governance: master-key generations, tenants' key-encryption keys
-- (crypto-erasure) and region pinning.

-- The master keys the deployment has used. Exactly one row is 'current':
-- every node must hold that key (a node whose key file lacks it refuses to start).
CREATE TABLE master_keys (
    fingerprint    TEXT PRIMARY KEY,
    generation     INTEGER NOT NULL UNIQUE,
    state          TEXT NOT NULL,           -- current | previous | retired
    created_at_ms  INTEGER NOT NULL,
    retired_at_ms  INTEGER
);

-- A tenant's key-encryption key (hex), bound into the wrap of each of its
-- data keys in the store. Erasure sets it to NULL: the data keys, and so
-- every snapshot, become unrecoverable, even from copies of the store.
CREATE TABLE tenant_keks (
    tenant         TEXT PRIMARY KEY,
    kek            TEXT,
    created_at_ms  INTEGER NOT NULL,
    erased_at_ms   INTEGER
);

ALTER TABLE tenants ADD COLUMN erased_at_ms INTEGER;   -- NULL: not erased
ALTER TABLE tenants ADD COLUMN regions TEXT;           -- comma-separated; NULL: any region
