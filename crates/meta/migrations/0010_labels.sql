-- Labels: key/value metadata given at create (never part of the manifest
-- or its digest). A sandbox's labels are all its rows here.
CREATE TABLE sandbox_labels (
    sandbox  TEXT NOT NULL,
    key      TEXT NOT NULL,
    value    TEXT NOT NULL,
    PRIMARY KEY (sandbox, key)
);
CREATE INDEX sandbox_labels_kv ON sandbox_labels (key, value);
-- Listing a tenant's sandboxes page by page, oldest first.
CREATE INDEX sandboxes_tenant_created ON sandboxes (tenant, created_at_ms, id);
