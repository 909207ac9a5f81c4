-- PostgreSQL dialect of migrations/0001_init.sql (same schema meaning):
-- sandboxes and their persisted lifecycle state, and the append-only,
-- hash-chained audit log. Integers are BIGINT (milliseconds, counters).
CREATE TABLE sandboxes (
    id               TEXT PRIMARY KEY,
    tenant           TEXT NOT NULL,
    backend          TEXT NOT NULL,
    state            TEXT NOT NULL,
    reason           TEXT,
    manifest         TEXT NOT NULL,
    manifest_digest  TEXT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    running_ms       BIGINT NOT NULL DEFAULT 0,
    running_since_ms BIGINT,
    paused_at_ms     BIGINT,
    expires_at_ms    BIGINT,
    pause_snapshot   TEXT,
    pause_kind       TEXT,
    source_snapshot  TEXT
);
CREATE INDEX sandboxes_tenant_state ON sandboxes (tenant, state);

CREATE TABLE audit (
    seq        BIGINT PRIMARY KEY,
    ts_ms      BIGINT NOT NULL,
    tenant     TEXT NOT NULL,
    actor      TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    detail     TEXT NOT NULL,
    prev_hash  TEXT NOT NULL,
    hash       TEXT NOT NULL
);
CREATE INDEX audit_target ON audit (target);

CREATE FUNCTION audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit log is append-only';
END;
$$;
CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_append_only();
CREATE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_append_only();
