-- Issue 38: a change records whose token made it as well as who acted. A worker's change is
-- `worker:POD` in `actor`; `token_holder` names the credential that spoke for that pod (a
-- person, or a worker token's own name). NULL for changes podq made by itself, and for
-- events from before this migration.
ALTER TABLE events ADD COLUMN token_holder TEXT;
