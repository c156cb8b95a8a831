-- Reads that cost the same with a long history: every list filter and count reads indexed
-- columns of `jobs` itself, state counts are kept up to date in the transaction that changes a
-- state, and goodput is stored on each attempt when it ends.

-- A linked job (`same_as`) holds its run's state in its own `state` column, mirrored by the
-- trigger below, so a filter on state never needs the join. `link_cancelled` is what used to
-- be a linked job's own `cancelled` state: the link was cancelled, whatever the run does.
ALTER TABLE jobs ADD COLUMN link_cancelled INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET link_cancelled = 1 WHERE same_as IS NOT NULL AND state = 'cancelled';
UPDATE jobs SET state = (SELECT r.state FROM jobs r WHERE r.id = jobs.same_as)
WHERE same_as IS NOT NULL AND link_cancelled = 0;

CREATE TRIGGER jobs_mirror_state AFTER UPDATE OF state ON jobs
WHEN NEW.same_as IS NULL AND NEW.state IS NOT OLD.state
BEGIN
    UPDATE jobs SET state = NEW.state WHERE same_as = NEW.id AND link_cancelled = 0;
END;

-- Jobs per (group, state) as the API shows them. SQLite fires these for the rows the mirror
-- trigger changes too, so linked jobs are counted in their run's state.
CREATE TABLE job_counts (
    group_name TEXT NOT NULL,
    state      TEXT NOT NULL,
    n          INTEGER NOT NULL,
    PRIMARY KEY (group_name, state)
) WITHOUT ROWID;
INSERT INTO job_counts SELECT group_name, state, COUNT(*) FROM jobs GROUP BY group_name, state;

CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
BEGIN
    INSERT OR IGNORE INTO job_counts VALUES (NEW.group_name, NEW.state, 0);
    UPDATE job_counts SET n = n + 1 WHERE group_name = NEW.group_name AND state = NEW.state;
END;

CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
WHEN NEW.state IS NOT OLD.state
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE group_name = OLD.group_name AND state = OLD.state;
    INSERT OR IGNORE INTO job_counts VALUES (NEW.group_name, NEW.state, 0);
    UPDATE job_counts SET n = n + 1 WHERE group_name = NEW.group_name AND state = NEW.state;
END;

CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE group_name = OLD.group_name AND state = OLD.state;
END;

-- The view no longer decides a linked job's state; it still shows the run's progress.
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
    COALESCE(r.id, j.id)                         AS run_id
FROM jobs j
LEFT JOIN jobs r ON r.id = j.same_as AND j.link_cancelled = 0;

-- Keyset pages in submission order, for each filter the API offers.
CREATE INDEX jobs_state_seq ON jobs (state, seq);
CREATE INDEX jobs_group_seq ON jobs (group_name, seq);
CREATE INDEX jobs_group_state_seq ON jobs (group_name, state, seq);
DROP INDEX jobs_experiment;
CREATE INDEX jobs_experiment ON jobs (experiment, seq);

-- Goodput of an attempt, written once when it ends (see server/src/store/goodput.rs).
ALTER TABLE attempts ADD COLUMN kept_s REAL;
ALTER TABLE attempts ADD COLUMN lost_s REAL;
ALTER TABLE attempts ADD COLUMN overhead_s REAL;
ALTER TABLE attempts ADD COLUMN kept_steps INTEGER;
CREATE INDEX attempts_open ON attempts (job_id) WHERE ended_at IS NULL;

-- The sum over every ended attempt, kept by trigger so status never sums the history.
CREATE TABLE goodput_totals (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    kept_s     REAL NOT NULL,
    lost_s     REAL NOT NULL,
    overhead_s REAL NOT NULL,
    kept_steps INTEGER NOT NULL
);
INSERT INTO goodput_totals VALUES (1, 0, 0, 0, 0);

CREATE TRIGGER attempts_goodput_total AFTER UPDATE OF kept_s ON attempts
WHEN OLD.kept_s IS NULL AND NEW.kept_s IS NOT NULL
BEGIN
    UPDATE goodput_totals SET kept_s = kept_s + NEW.kept_s, lost_s = lost_s + NEW.lost_s,
        overhead_s = overhead_s + NEW.overhead_s, kept_steps = kept_steps + NEW.kept_steps
    WHERE id = 1;
END;
