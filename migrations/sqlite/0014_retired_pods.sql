-- Issue 40: a pool deletes its slices, and each slice is a pod of its own name. A pod the
-- pool gave back is retired: kept for the history that names it (its attempts, logs and pod
-- time), no longer shown as a pod nor counted by the plan. A pod that reports again is back.
ALTER TABLE pods ADD COLUMN retired_at INTEGER;
