-- PostgreSQL dialect of migrations/0002_runs.sql: runs, their ordered steps,
-- tool calls with idempotency keys, and human approvals. `rowid` stands in
-- for SQLite's implicit rowid (insertion order within one millisecond).
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    sandbox        TEXT,
    status         TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL
);
CREATE INDEX runs_tenant ON runs (tenant, created_at_ms);

CREATE TABLE run_steps (
    run     TEXT NOT NULL REFERENCES runs (id),
    seq     BIGINT NOT NULL,
    kind    TEXT NOT NULL,
    at_ms   BIGINT NOT NULL,
    actor   TEXT NOT NULL,
    call    TEXT,
    data    TEXT NOT NULL,
    PRIMARY KEY (run, seq)
);

CREATE TABLE tool_calls (
    rowid            BIGSERIAL,
    id               TEXT PRIMARY KEY,
    run              TEXT NOT NULL REFERENCES runs (id),
    idempotency_key  TEXT NOT NULL,
    spec             TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,
    state            TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    created_at_ms    BIGINT NOT NULL,
    updated_at_ms    BIGINT NOT NULL,
    UNIQUE (run, idempotency_key)
);
CREATE INDEX tool_calls_state ON tool_calls (state);

CREATE TABLE approvals (
    rowid            BIGSERIAL,
    call             TEXT PRIMARY KEY REFERENCES tool_calls (id),
    run              TEXT NOT NULL REFERENCES runs (id),
    requested_at_ms  BIGINT NOT NULL,
    decision         TEXT,
    decided_by       TEXT,
    decided_at_ms    BIGINT,
    reason           TEXT
);
CREATE INDEX approvals_run ON approvals (run);
