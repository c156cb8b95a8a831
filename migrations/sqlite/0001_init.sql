-- podq schema. Times are milliseconds since the Unix epoch (UTC); ids are uuid text.

-- The catalog as loaded at the last start: kept so answers about old jobs can name their
-- experiment even after the files changed. Jobs carry their own config snapshot.
CREATE TABLE experiments (
    name          TEXT PRIMARY KEY,
    group_name    TEXT NOT NULL,
    config_json   TEXT NOT NULL,
    config_sha256 TEXT NOT NULL,
    est_hours     REAL NOT NULL,
    source_file   TEXT NOT NULL,
    loaded_at     INTEGER NOT NULL
);

CREATE TABLE jobs (
    id             TEXT PRIMARY KEY,
    -- Submission order; a job keeps it across attempts, so a preempted job goes back ahead of
    -- jobs submitted after it.
    seq            INTEGER NOT NULL UNIQUE,
    experiment     TEXT NOT NULL,
    group_name     TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN
                     ('queued', 'leased', 'running', 'succeeded', 'failed', 'cancelled', 'held')),
    priority       INTEGER NOT NULL DEFAULT 0,
    accelerator    TEXT NOT NULL,
    config_json    TEXT NOT NULL,
    config_sha256  TEXT NOT NULL,
    est_hours      REAL NOT NULL,
    checkpoint_dir TEXT NOT NULL,
    resume_from    TEXT,
    resume_step    INTEGER,
    last_step      INTEGER,
    total_steps    INTEGER,
    attempts       INTEGER NOT NULL DEFAULT 0,
    failures       INTEGER NOT NULL DEFAULT 0,
    max_failures   INTEGER NOT NULL,
    preemptions    INTEGER NOT NULL DEFAULT 0,
    -- Consecutive attempts that ended with no new committed checkpoint and no step progress.
    stalled_attempts INTEGER NOT NULL DEFAULT 0,
    -- Set when the job shares the run of another job with an identical training config.
    same_as        TEXT REFERENCES jobs(id),
    -- Backoff after a failure: not leasable before this time.
    not_before     INTEGER,
    -- The live lease: every worker call must name it (fencing).
    lease_id       TEXT UNIQUE,
    lease_pod      TEXT,
    -- Set by a cancel while a lease is live; the next heartbeat tells the worker.
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    -- The next attempt must first verify the checkpoint store (after a lost worker).
    verify_checkpoints INTEGER NOT NULL DEFAULT 0,
    message        TEXT,
    submitted_at   INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);
CREATE INDEX jobs_leasable ON jobs (state, accelerator, priority DESC, seq) WHERE same_as IS NULL;
CREATE INDEX jobs_experiment ON jobs (experiment);
CREATE INDEX jobs_sha ON jobs (config_sha256);
CREATE INDEX jobs_same_as ON jobs (same_as) WHERE same_as IS NOT NULL;

CREATE TABLE attempts (
    job_id        TEXT NOT NULL REFERENCES jobs(id),
    attempt       INTEGER NOT NULL,
    lease_id      TEXT NOT NULL UNIQUE,
    pod           TEXT NOT NULL,
    resume_from   TEXT,
    started_at    INTEGER NOT NULL,
    running_at    INTEGER,
    first_step_at INTEGER,
    ended_at      INTEGER,
    outcome       TEXT CHECK (outcome IN
                    ('succeeded', 'preempted', 'failed', 'hung', 'lost', 'cancelled')),
    start_step    INTEGER,
    first_step    INTEGER,
    end_step      INTEGER,
    exit_codes_json TEXT,
    log_tail      TEXT,
    message       TEXT,
    PRIMARY KEY (job_id, attempt)
);

CREATE TABLE checkpoints (
    job_id    TEXT NOT NULL REFERENCES jobs(id),
    step      INTEGER NOT NULL,
    uri       TEXT NOT NULL,
    committed INTEGER NOT NULL,
    attempt   INTEGER NOT NULL,
    seen_at   INTEGER NOT NULL,
    PRIMARY KEY (job_id, step)
);

-- One row per (job, metric name); points reference it so the big table stays narrow.
CREATE TABLE metric_series (
    id      INTEGER PRIMARY KEY,
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    name    TEXT NOT NULL,
    UNIQUE (job_id, name)
);

CREATE TABLE metric_points (
    series_id INTEGER NOT NULL REFERENCES metric_series(id),
    step      INTEGER NOT NULL,
    value     REAL NOT NULL,
    attempt   INTEGER NOT NULL,
    PRIMARY KEY (series_id, step)
) WITHOUT ROWID;

CREATE TABLE events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    job_id     TEXT REFERENCES jobs(id),
    pod        TEXT,
    kind       TEXT NOT NULL,
    message    TEXT NOT NULL
);
CREATE INDEX events_job ON events (job_id, id) WHERE job_id IS NOT NULL;
CREATE INDEX events_pod ON events (pod, id) WHERE pod IS NOT NULL;

CREATE TABLE pods (
    name           TEXT PRIMARY KEY,
    accelerator    TEXT NOT NULL,
    hosts          INTEGER NOT NULL,
    state          TEXT NOT NULL,
    health         TEXT NOT NULL,
    preflight_json TEXT,
    recovery       TEXT,
    last_seen_at   INTEGER NOT NULL
);

CREATE TABLE schedules (
    id          TEXT PRIMARY KEY,
    cron        TEXT NOT NULL,
    body_json   TEXT NOT NULL,
    enabled     INTEGER NOT NULL DEFAULT 1,
    next_run_at INTEGER,
    last_run_at INTEGER,
    created_at  INTEGER NOT NULL
);

-- A POST with an Idempotency-Key stores its answer in the same transaction as its effect.
CREATE TABLE idempotency_keys (
    key            TEXT NOT NULL,
    route          TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    status         INTEGER NOT NULL,
    response_json  TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    PRIMARY KEY (key, route)
);

-- Jobs as the API shows them: a job linked to another run (`same_as`) mirrors that run's
-- state, progress and checkpoints, unless the link itself was cancelled.
CREATE VIEW job_view AS
SELECT
    j.id, j.seq, j.experiment, j.group_name, j.priority, j.submitted_at, j.config_sha256,
    j.same_as, j.max_failures, j.accelerator, j.est_hours,
    COALESCE(r.state, j.state)                   AS state,
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
LEFT JOIN jobs r ON r.id = j.same_as AND j.state <> 'cancelled';
