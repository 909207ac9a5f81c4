-- Templates: named, versioned snapshots a tenant creates sandboxes from.
-- `version` counts from 1 per (tenant, name) and is never reused: a deleted
-- version keeps its row (deleted_at_ms set) so the next one gets a new number.
CREATE TABLE templates (
    tenant           TEXT NOT NULL,
    name             TEXT NOT NULL,
    version          INTEGER NOT NULL,
    snapshot         TEXT NOT NULL,
    backend          TEXT NOT NULL,
    manifest_digest  TEXT NOT NULL,
    source_sandbox   TEXT,
    created_by       TEXT NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    deleted_at_ms    INTEGER,
    PRIMARY KEY (tenant, name, version)
);
CREATE INDEX templates_snapshot ON templates (tenant, snapshot);
