-- Scoped, expiring, rotatable tokens. Tokens made before this migration keep
-- every scope (scopes NULL), never expire and reach every sandbox of their tenant.
ALTER TABLE api_tokens ADD COLUMN scopes TEXT;             -- comma-separated; NULL: all
ALTER TABLE api_tokens ADD COLUMN expires_at_ms INTEGER;   -- NULL: never
ALTER TABLE api_tokens ADD COLUMN last_used_at_ms INTEGER; -- updated at most once a minute
ALTER TABLE api_tokens ADD COLUMN sandbox TEXT;            -- only this sandbox's routes
ALTER TABLE api_tokens ADD COLUMN rotated_from TEXT;       -- the token this one replaced
