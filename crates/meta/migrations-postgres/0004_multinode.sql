-- Several daemons sharing one database (PostgreSQL in production; the same
-- tables exist on SQLite, where the single daemon holds every lease).
--
-- nodes: each daemon registers itself and heartbeats.
CREATE TABLE nodes (
    id               TEXT PRIMARY KEY,
    url              TEXT NOT NULL,
    started_at_ms    BIGINT NOT NULL,
    heartbeat_at_ms  BIGINT NOT NULL
);

-- leases: the node that runs a sandbox. `token` is the fencing token: it
-- grows by one at every change of holder and never goes back, and every
-- state write of a leased sandbox names the token it believes it holds, so a
-- node whose lease was taken over cannot write any more. A released lease
-- (paused sandbox) keeps its row with node NULL so the token keeps growing.
CREATE TABLE leases (
    sandbox         TEXT PRIMARY KEY,
    node            TEXT,
    token           BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    acquired_at_ms  BIGINT NOT NULL
);
CREATE INDEX leases_node ON leases (node);

-- Periodic checkpoints of a running sandbox (lifecycle.checkpoint_secs), and
-- what a takeover recovered from: the snapshot, when, and how much running
-- time after that snapshot was lost with the node that died.
ALTER TABLE sandboxes ADD COLUMN checkpoint_snapshot TEXT;
ALTER TABLE sandboxes ADD COLUMN checkpoint_at_ms BIGINT;
ALTER TABLE sandboxes ADD COLUMN recovered_from_snapshot TEXT;
ALTER TABLE sandboxes ADD COLUMN recovered_at_ms BIGINT;
ALTER TABLE sandboxes ADD COLUMN progress_lost_ms BIGINT;
