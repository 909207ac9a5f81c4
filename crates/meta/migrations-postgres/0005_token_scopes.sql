-- PostgreSQL dialect of migrations/0005_token_scopes.sql.
-- Tokens made before it keep every scope, never expire and reach every sandbox of their tenant.
ALTER TABLE api_tokens ADD COLUMN scopes TEXT;             -- comma-separated; NULL: all
ALTER TABLE api_tokens ADD COLUMN expires_at_ms BIGINT;    -- NULL: never
ALTER TABLE api_tokens ADD COLUMN last_used_at_ms BIGINT;  -- updated at most once a minute
ALTER TABLE api_tokens ADD COLUMN sandbox TEXT;            -- only this sandbox's routes
ALTER TABLE api_tokens ADD COLUMN rotated_from TEXT;       -- the token this one replaced
