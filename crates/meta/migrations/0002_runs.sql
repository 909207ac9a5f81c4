-- Run state (issue 5): runs, their ordered steps, tool calls with
-- idempotency keys, and human approvals. Every transition of a run is one
-- transaction that compare-and-sets the run's status and the call's state.
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    tenant         TEXT NOT NULL,
    sandbox        TEXT,
    status         TEXT NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
);
CREATE INDEX runs_tenant ON runs (tenant, created_at_ms);

CREATE TABLE run_steps (
    run     TEXT NOT NULL REFERENCES runs (id),
    seq     INTEGER NOT NULL,
    kind    TEXT NOT NULL,
    at_ms   INTEGER NOT NULL,
    actor   TEXT NOT NULL,
    call    TEXT,
    data    TEXT NOT NULL,
    PRIMARY KEY (run, seq)
);

-- `spec` holds what the call does (argv, cwd, timeout, env *names*); env
-- values are never stored. The intent row exists before the side effect runs.
CREATE TABLE tool_calls (
    id               TEXT PRIMARY KEY,
    run              TEXT NOT NULL REFERENCES runs (id),
    idempotency_key  TEXT NOT NULL,
    spec             TEXT NOT NULL,
    fingerprint      TEXT NOT NULL,
    state            TEXT NOT NULL,
    result           TEXT,
    error            TEXT,
    created_at_ms    INTEGER NOT NULL,
    updated_at_ms    INTEGER NOT NULL,
    UNIQUE (run, idempotency_key)
);
CREATE INDEX tool_calls_state ON tool_calls (state);

CREATE TABLE approvals (
    call             TEXT PRIMARY KEY REFERENCES tool_calls (id),
    run              TEXT NOT NULL REFERENCES runs (id),
    requested_at_ms  INTEGER NOT NULL,
    decision         TEXT,
    decided_by       TEXT,
    decided_at_ms    INTEGER,
    reason           TEXT
);
CREATE INDEX approvals_run ON approvals (run);
