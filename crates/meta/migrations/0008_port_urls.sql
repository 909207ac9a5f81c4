-- Keys the daemons of one database share, each sealed by the caller under
-- the store's master key before it reaches this table (every node opens the
-- same value). The first node to need a key inserts it; the others read it.
CREATE TABLE daemon_keys (
    name           TEXT PRIMARY KEY,
    sealed         BLOB NOT NULL,
    created_at_ms  INTEGER NOT NULL
);

-- Revoked signed port URLs. url_id '*' revokes every URL of that sandbox
-- port issued at or before revoked_at_ms. A row is only needed until the
-- URLs it revokes have expired (keep_until_ms); older rows are purged.
CREATE TABLE port_url_revocations (
    sandbox        TEXT NOT NULL,
    port           INTEGER NOT NULL,
    url_id         TEXT NOT NULL,
    revoked_at_ms  INTEGER NOT NULL,
    keep_until_ms  INTEGER NOT NULL,
    PRIMARY KEY (sandbox, port, url_id)
);
