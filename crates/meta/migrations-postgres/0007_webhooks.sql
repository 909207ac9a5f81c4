-- PostgreSQL dialect of migrations/0007_webhooks.sql: lifecycle webhook endpoints
-- fed from the audit log, and their dead letters.
CREATE TABLE webhooks (
    id              TEXT PRIMARY KEY,
    tenant          TEXT NOT NULL REFERENCES tenants (id),
    url             TEXT NOT NULL,
    secret_sealed   BYTEA NOT NULL,
    events          TEXT NOT NULL,          -- comma-separated event types, or '*'
    cursor          BIGINT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    claim_node      TEXT,
    claim_until_ms  BIGINT NOT NULL DEFAULT 0,
    delivered       BIGINT NOT NULL DEFAULT 0,
    failed          BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX webhooks_tenant ON webhooks (tenant);

-- Events an endpoint never acknowledged after every retry.
CREATE TABLE webhook_dead (
    webhook         TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    event_type      TEXT NOT NULL,
    payload         TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    last_error      TEXT NOT NULL,
    at_ms           BIGINT NOT NULL,
    PRIMARY KEY (webhook, seq)
);
