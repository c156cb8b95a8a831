-- Issue 27: a scheduler for a team. People and their tokens, who did what, and priority
-- classes that may evict a running job.

-- A person (or a worker's credential) and the SHA-256 of their token: the token itself is
-- never stored. `pods_json` limits a worker token to the named pods (NULL: any pod).
CREATE TABLE users (
    name         TEXT PRIMARY KEY,
    role         TEXT NOT NULL CHECK (role IN ('viewer', 'submitter', 'admin', 'worker')),
    token_sha256 TEXT NOT NULL UNIQUE,
    pods_json    TEXT,
    created_at   INTEGER NOT NULL,
    created_by   TEXT NOT NULL,
    disabled_at  INTEGER
);

-- Who made each change: a person's name, `worker:POD`, `schedule:ID` or `podq`; from which
-- address and in which request, when a request made it. Events from before this migration
-- were made by podq's single admin: they say `podq`.
ALTER TABLE events ADD COLUMN actor TEXT NOT NULL DEFAULT 'podq';
ALTER TABLE events ADD COLUMN address TEXT;
ALTER TABLE events ADD COLUMN request_id TEXT;
CREATE INDEX events_actor ON events (actor, id);
CREATE INDEX events_at ON events (at);

-- Who submitted a job (NULL for jobs from before this migration), and its priority class:
-- `class_rank` is the class's place in the suite's list (0 first), the queue's first order.
ALTER TABLE jobs ADD COLUMN submitted_by TEXT;
ALTER TABLE jobs ADD COLUMN priority_class TEXT NOT NULL DEFAULT 'normal';
ALTER TABLE jobs ADD COLUMN class_rank INTEGER NOT NULL DEFAULT 1;
-- An evicted job goes back to the head of its class.
ALTER TABLE jobs ADD COLUMN queue_head INTEGER NOT NULL DEFAULT 0;
-- What the server asked a live lease's worker to stop for ('evicted' or 'suspended'), with
-- the message the attempt ends with. The next heartbeat tells the worker.
ALTER TABLE jobs ADD COLUMN stop_request TEXT;
ALTER TABLE jobs ADD COLUMN stop_message TEXT;
-- The pod an evicting job waits for: no other job may lease it before this time.
ALTER TABLE jobs ADD COLUMN reserved_pod TEXT;
ALTER TABLE jobs ADD COLUMN reserved_until INTEGER;
CREATE INDEX jobs_reserved ON jobs (reserved_pod) WHERE reserved_pod IS NOT NULL;
CREATE INDEX jobs_submitted_by ON jobs (submitted_by, seq);

DROP INDEX jobs_leasable;
CREATE INDEX jobs_leasable ON jobs (state, accelerator, class_rank, queue_head DESC, priority DESC, seq)
    WHERE same_as IS NULL;

-- Why an attempt ended beyond its outcome: 'evicted' or 'suspended' (both end `preempted`).
ALTER TABLE attempts ADD COLUMN cause TEXT;

DROP VIEW job_view;
CREATE VIEW job_view AS
SELECT
    j.id, j.seq, j.experiment, j.group_name, j.priority, j.submitted_at, j.config_sha256,
    j.same_as, j.max_failures, j.accelerator, j.est_hours, j.state,
    MAX(j.updated_at, COALESCE(r.updated_at, 0)) AS updated_at,
    COALESCE(r.checkpoint_dir, j.checkpoint_dir) AS checkpoint_dir,
    COALESCE(r.resume_from, j.resume_from)       AS resume_from,
    COALESCE(r.last_step, j.last_step)           AS last_step,
    COALESCE(r.total_steps, j.total_steps)       AS total_steps,
    COALESCE(r.attempts, j.attempts)             AS attempts,
    COALESCE(r.failures, j.failures)             AS failures,
    COALESCE(r.preemptions, j.preemptions)       AS preemptions,
    COALESCE(r.not_before, j.not_before)         AS not_before,
    COALESCE(r.message, j.message)               AS message,
    COALESCE(r.id, j.id)                         AS run_id,
    j.submitted_by, j.priority_class
FROM jobs j
LEFT JOIN jobs r ON r.id = j.same_as AND j.link_cancelled = 0;
