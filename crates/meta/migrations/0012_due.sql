-- The reaper's deadline index: `due_at_ms` is the earliest time any
-- lifecycle deadline of the sandbox could fall (idle, lifetime, checkpoint,
-- paused TTL, ...); NULL when none can. It is a lower bound: the reaper reads
-- the rows due in order, acts or pushes the value forward, so a pass costs
-- the sandboxes due, not every sandbox. Existing live rows start due, so
-- the first pass computes their value.
ALTER TABLE sandboxes ADD COLUMN due_at_ms INTEGER;
UPDATE sandboxes SET due_at_ms = 0 WHERE state != 'destroyed';
CREATE INDEX sandboxes_due ON sandboxes (due_at_ms) WHERE due_at_ms IS NOT NULL;
