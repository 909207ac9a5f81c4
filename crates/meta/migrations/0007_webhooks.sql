-- Lifecycle webhooks: per-tenant endpoints fed from the audit log. `cursor`
-- is the last audit seq handled for the endpoint (delivered or dead-lettered);
-- a node delivers an endpoint only while it holds its claim.
CREATE TABLE webhooks (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL REFERENCES tenants (id),
    url             TEXT NOT NULL,
    secret_sealed   BLOB NOT NULL,
    events          TEXT NOT NULL,          -- comma-separated event types, or '*'
    cursor          INTEGER NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    claim_node      TEXT,
    claim_until_ms  INTEGER NOT NULL DEFAULT 0,
    delivered       INTEGER NOT NULL DEFAULT 0,
    failed          INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_tenant ON webhooks (tenant);

-- Events an endpoint never acknowledged after every retry.
CREATE TABLE webhook_dead (
    webhook         TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    attempts        INTEGER NOT NULL,
    last_error      TEXT NOT NULL,
    at_ms           INTEGER NOT NULL,
    PRIMARY KEY (webhook, seq)
);
