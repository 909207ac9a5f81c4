-- Sandboxes and their persisted lifecycle state. A row's `state` is written
-- before the backend acts (transitional states), so a restart can reconcile.
CREATE TABLE sandboxes (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    backend          TEXT NOT NULL,
    state            TEXT NOT NULL,
    reason           TEXT,
    manifest         TEXT NOT NULL,
    manifest_digest  TEXT NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    -- accumulated running time, paused time excluded
    running_ms       INTEGER NOT NULL DEFAULT 0,
    running_since_ms INTEGER,
    paused_at_ms     INTEGER,
    expires_at_ms    INTEGER,
    -- snapshot holding the state of the last pause, and its kind (memory | filesystem)
    pause_snapshot   TEXT,
    pause_kind       TEXT,
    source_snapshot  TEXT
);
CREATE INDEX sandboxes_tenant_state ON sandboxes (tenant, state);

-- Append-only audit log; each entry's hash covers the previous entry's hash.
CREATE TABLE audit (
    seq        INTEGER PRIMARY KEY,
    ts_ms      INTEGER NOT NULL,
    tenant     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    detail     TEXT NOT NULL,
    prev_hash  TEXT NOT NULL,
    hash       TEXT NOT NULL
);
CREATE INDEX audit_target ON audit (target);
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
