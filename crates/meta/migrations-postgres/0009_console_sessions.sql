-- Web console sessions. A browser signs in with an API token once and gets
-- a random session id in an httpOnly cookie; only the id's hash is stored
-- here, with the token it stands for (revoking the token ends its
-- sessions), the actor name shown on decisions, and when it expires.
CREATE TABLE console_sessions (
    id_hash        TEXT PRIMARY KEY,
    token_id       TEXT NOT NULL,
    actor          TEXT NOT NULL,
    created_at_ms  BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL
);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at_ms);
