-- Issue 28 (SQLite 0010): the `stopped` state, the rule that stopped a run, and NaN metric
-- values stored as NULL (as SQLite stores a bound NaN). The comments of
-- migrations/sqlite/0010_stop_rules.sql apply.

ALTER TABLE jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_state_check CHECK (state IN
    ('queued', 'leased', 'running', 'succeeded', 'failed', 'cancelled', 'held', 'stopped'));
ALTER TABLE metric_points ALTER COLUMN value DROP NOT NULL;

ALTER TABLE jobs ADD COLUMN stop_rule TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN stop_metric TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN stop_step BIGINT;
ALTER TABLE jobs ADD COLUMN stop_value TEXT COLLATE "C";
ALTER TABLE jobs ADD COLUMN stop_at BIGINT;
ALTER TABLE jobs ADD COLUMN stop_saved_hours DOUBLE PRECISION;
ALTER TABLE jobs ADD COLUMN ignore_stop_rules BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN diverged_reports BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN diverged_step BIGINT;

-- A linked job shows its run's stop, as it shows its run's state.
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
    j.submitted_by, j.priority_class,
    COALESCE(r.stop_rule, j.stop_rule)           AS stop_rule,
    COALESCE(r.stop_metric, j.stop_metric)       AS stop_metric,
    COALESCE(r.stop_step, j.stop_step)           AS stop_step,
    COALESCE(r.stop_value, j.stop_value)         AS stop_value,
    COALESCE(r.stop_at, j.stop_at)               AS stop_at,
    COALESCE(r.ignore_stop_rules, j.ignore_stop_rules) AS ignore_stop_rules
FROM jobs j
LEFT JOIN jobs r ON r.id = j.same_as AND j.link_cancelled = 0;
