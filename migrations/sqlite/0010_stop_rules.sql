-- Issue 28: a run a stop rule or the divergence guard ended is `stopped`, and says which
-- rule fired, at which step, on which value. The new state and NaN metric values also need
-- two constraints loosened (jobs.state's CHECK, metric_points.value's NOT NULL: SQLite stores
-- a bound NaN as NULL). SQLite cannot alter a constraint in SQL; the store does it after the
-- migrations, by sqlite.org's documented procedure (store/backend/sqlite.rs,
-- `loosen_constraints`).

-- The rule as written, the metric that fired it, its step and value (Rust's f64 text: "NaN",
-- "inf", "0.0123"), and when.
ALTER TABLE jobs ADD COLUMN stop_rule TEXT;
ALTER TABLE jobs ADD COLUMN stop_metric TEXT;
ALTER TABLE jobs ADD COLUMN stop_step INTEGER;
ALTER TABLE jobs ADD COLUMN stop_value TEXT;
ALTER TABLE jobs ADD COLUMN stop_at INTEGER;
-- The pod-hours the run would still have taken when a rule ended it: what stopping saved.
ALTER TABLE jobs ADD COLUMN stop_saved_hours REAL;
-- `requeue --ignore-stop-rules`: nothing judges this job's run any more.
ALTER TABLE jobs ADD COLUMN ignore_stop_rules INTEGER NOT NULL DEFAULT 0;
-- The divergence guard's count of consecutive bad reports, kept with the job so a restart
-- or a new attempt does not reset it.
ALTER TABLE jobs ADD COLUMN diverged_reports INTEGER NOT NULL DEFAULT 0;
-- The step of the last report it counted, so a batch the worker sends again counts once.
ALTER TABLE jobs ADD COLUMN diverged_step INTEGER;

-- A linked job shows its run's stop, as it shows its run's state.
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
    j.submitted_by, j.priority_class,
    COALESCE(r.stop_rule, j.stop_rule)           AS stop_rule,
    COALESCE(r.stop_metric, j.stop_metric)       AS stop_metric,
    COALESCE(r.stop_step, j.stop_step)           AS stop_step,
    COALESCE(r.stop_value, j.stop_value)         AS stop_value,
    COALESCE(r.stop_at, j.stop_at)               AS stop_at,
    COALESCE(r.ignore_stop_rules, j.ignore_stop_rules) AS ignore_stop_rules
FROM jobs j
LEFT JOIN jobs r ON r.id = j.same_as AND j.link_cancelled = 0;
