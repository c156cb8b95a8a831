-- Issue 27 (SQLite 0009): people and their tokens, who did what, and priority classes that
-- may evict a running job. The comments of migrations/sqlite/0009_team.sql apply.

CREATE TABLE users (
    name         TEXT COLLATE "C" PRIMARY KEY,
    role         TEXT COLLATE "C" NOT NULL CHECK (role IN ('viewer', 'submitter', 'admin', 'worker')),
    token_sha256 TEXT COLLATE "C" NOT NULL UNIQUE,
    pods_json    TEXT COLLATE "C",
    created_at   BIGINT NOT NULL,
    created_by   TEXT COLLATE "C" NOT NULL,
    disabled_at  BIGINT
);

ALTER TABLE events ADD COLUMN actor TEXT COLLATE "C" NOT NULL DEFAULT 'podq';
ALTER TABLE events ADD COLUMN address TEXT COLLATE "C";
ALTER TABLE events ADD COLUMN request_id TEXT COLLATE "C";
CREATE INDEX events_actor ON events (actor, id);
CREATE INDEX events_at ON events (at);

ALTER TABLE jobs ADD COLUMN submitted_by TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN priority_class TEXT COLLATE "C" NOT NULL DEFAULT 'normal';
ALTER TABLE jobs ADD COLUMN class_rank BIGINT NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN queue_head BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN stop_request TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN stop_message TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN reserved_pod TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN reserved_until BIGINT;
CREATE INDEX jobs_reserved ON jobs (reserved_pod) WHERE reserved_pod IS NOT NULL;
CREATE INDEX jobs_submitted_by ON jobs (submitted_by, seq);

DROP INDEX jobs_leasable;
CREATE INDEX jobs_leasable ON jobs (state, accelerator, class_rank, queue_head DESC, priority DESC, seq)
    WHERE same_as IS NULL;

ALTER TABLE attempts ADD COLUMN cause TEXT COLLATE "C";

-- New columns go at the end, which CREATE OR REPLACE VIEW allows.
CREATE OR REPLACE VIEW job_view AS
SELECT
    j.id, j.seq, j.experiment, j.group_name, j.priority, j.submitted_at, j.config_sha256,
    j.same_as, j.max_failures, j.accelerator, j.est_hours, j.state,
    GREATEST(j.updated_at, COALESCE(r.updated_at, 0)) AS updated_at,
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
