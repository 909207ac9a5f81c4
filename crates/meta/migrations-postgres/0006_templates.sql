-- PostgreSQL dialect of migrations/0006_templates.sql: named, versioned
-- snapshots (versions never reused; deleted ones keep their row).
CREATE TABLE templates (
    tenant           TEXT NOT NULL,
    name             TEXT NOT NULL,
    version          BIGINT NOT NULL,
    snapshot         TEXT NOT NULL,
    backend          TEXT NOT NULL,
    manifest_digest  TEXT NOT NULL,
    source_sandbox   TEXT,
    created_by       TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    deleted_at_ms    BIGINT,
    PRIMARY KEY (tenant, name, version)
);
CREATE INDEX templates_snapshot ON templates (tenant, snapshot);
