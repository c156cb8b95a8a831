-- podq schema for PostgreSQL (15 or later): the PostgreSQL equivalent of the SQLite
-- migrations 0001-0008 (migrations/sqlite/0001_init.sql .. 0008_pod_time.sql), i.e. the schema
-- SQLite reaches after all eight of them, with the same tables (columns in the same order:
-- SQLite's ADD COLUMN appends), constraints, indexes, views, trigger effects and seed rows,
-- under the same names.
--
-- Any future schema change needs a migration in EACH directory: one in migrations/sqlite/ for
-- SQLite and one in migrations/postgres/ for PostgreSQL, keeping the two schemas equivalent.
--
-- Conventions, so that the same SQL text runs on both stores:
--   * SQLite INTEGER is BIGINT (Rust decodes every integer as i64; flags stay BIGINT 0/1, never
--     boolean), REAL is DOUBLE PRECISION, TEXT is TEXT.
--   * Every TEXT column is COLLATE "C": SQLite compares and sorts text bytewise (its BINARY
--     collation), and so does "C", whatever locale the database was created with. It is still
--     type text: parameters and literals compare with it as usual.
--   * SQLite's rowid ids (metric_series, events, webhooks, webhook_outbox, log_lines) are
--     identities BY DEFAULT, so a copy tool may insert the old ids; it must then move each
--     sequence past them: SELECT setval(pg_get_serial_sequence('events', 'id'), MAX(id)) ...
--     An identity never hands out an id twice, like events' AUTOINCREMENT; unlike SQLite's plain
--     rowids it leaves gaps (e.g. after INSERT .. ON CONFLICT) and never reuses a deleted top id.
--   * WITHOUT ROWID is dropped; log_lines' column "offset" is a reserved word here and must be
--     written quoted (SQLite accepts the quoted form too).
--   * Each SQLite trigger is a plpgsql function and an AFTER .. FOR EACH ROW trigger of the same
--     name, with the same WHEN condition and the same effect in the same transaction. They fire
--     on COPY too: a copy tool that brings job_counts, goodput_totals, fresh_queue and
--     webhook_outbox along must load with the triggers off (ALTER TABLE .. DISABLE TRIGGER USER,
--     or session_replication_role = replica), or leave those tables to the triggers.
-- Times are milliseconds since the Unix epoch (UTC); ids are uuid text.

-- The catalog as loaded at the last start: kept so answers about old jobs can name their
-- experiment even after the files changed. Jobs carry their own config snapshot.
CREATE TABLE experiments (
    name          TEXT COLLATE "C" PRIMARY KEY,
    group_name    TEXT COLLATE "C" NOT NULL,
    config_json   TEXT COLLATE "C" NOT NULL,
    config_sha256 TEXT COLLATE "C" NOT NULL,
    est_hours     DOUBLE PRECISION NOT NULL,
    source_file   TEXT COLLATE "C" NOT NULL,
    loaded_at     BIGINT NOT NULL
);

CREATE TABLE jobs (
    id             TEXT COLLATE "C" PRIMARY KEY,
    -- Submission order; a job keeps it across attempts, so a preempted job goes back ahead of
    -- jobs submitted after it.
    seq            BIGINT NOT NULL UNIQUE,
    experiment     TEXT COLLATE "C" NOT NULL,
    group_name     TEXT COLLATE "C" NOT NULL,
    -- A linked job (`same_as`) holds its run's state here, mirrored by jobs_mirror_state.
    state          TEXT COLLATE "C" NOT NULL CHECK (state IN
                     ('queued', 'leased', 'running', 'succeeded', 'failed', 'cancelled', 'held')),
    priority       BIGINT NOT NULL DEFAULT 0,
    accelerator    TEXT COLLATE "C" NOT NULL,
    config_json    TEXT COLLATE "C" NOT NULL,
    config_sha256  TEXT COLLATE "C" NOT NULL,
    est_hours      DOUBLE PRECISION NOT NULL,
    checkpoint_dir TEXT COLLATE "C" NOT NULL,
    resume_from    TEXT COLLATE "C",
    resume_step    BIGINT,
    last_step      BIGINT,
    total_steps    BIGINT,
    attempts       BIGINT NOT NULL DEFAULT 0,
    failures       BIGINT NOT NULL DEFAULT 0,
    max_failures   BIGINT NOT NULL,
    preemptions    BIGINT NOT NULL DEFAULT 0,
    -- Consecutive attempts that ended with no new committed checkpoint and no step progress.
    stalled_attempts BIGINT NOT NULL DEFAULT 0,
    -- Set when the job shares the run of another job with an identical training config.
    same_as        TEXT COLLATE "C" REFERENCES jobs(id),
    -- Backoff after a failure: not leasable before this time.
    not_before     BIGINT,
    -- The live lease: every worker call must name it (fencing).
    lease_id       TEXT COLLATE "C" UNIQUE,
    lease_pod      TEXT COLLATE "C",
    -- Set by a cancel while a lease is live; the next heartbeat tells the worker.
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    -- The next attempt must first verify the checkpoint store (after a lost worker).
    verify_checkpoints BIGINT NOT NULL DEFAULT 0,
    message        TEXT COLLATE "C",
    submitted_at   BIGINT NOT NULL,
    updated_at     BIGINT NOT NULL,
    -- (SQLite 0003) What used to be a linked job's own `cancelled` state: the link was
    -- cancelled, whatever the run does.
    link_cancelled BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_leasable ON jobs (state, accelerator, priority DESC, seq) WHERE same_as IS NULL;
CREATE INDEX jobs_sha ON jobs (config_sha256);
CREATE INDEX jobs_same_as ON jobs (same_as) WHERE same_as IS NOT NULL;
-- (SQLite 0002) The claim checks that the pod holds no live lease: a pod's live jobs by index.
CREATE INDEX jobs_live_pod ON jobs (lease_pod) WHERE state IN ('leased', 'running');
-- (SQLite 0003) Keyset pages in submission order, for each filter the API offers.
CREATE INDEX jobs_state_seq ON jobs (state, seq);
CREATE INDEX jobs_group_seq ON jobs (group_name, seq);
CREATE INDEX jobs_group_state_seq ON jobs (group_name, state, seq);
CREATE INDEX jobs_experiment ON jobs (experiment, seq);
-- (SQLite 0006) Queued runs that made progress before, in lease order: few, whatever the
-- depth of the queue.
CREATE INDEX jobs_progressed_queue ON jobs (priority DESC, seq)
    WHERE state = 'queued' AND same_as IS NULL AND last_step IS NOT NULL;

CREATE TABLE attempts (
    job_id        TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    attempt       BIGINT NOT NULL,
    lease_id      TEXT COLLATE "C" NOT NULL UNIQUE,
    pod           TEXT COLLATE "C" NOT NULL,
    resume_from   TEXT COLLATE "C",
    started_at    BIGINT NOT NULL,
    running_at    BIGINT,
    first_step_at BIGINT,
    ended_at      BIGINT,
    outcome       TEXT COLLATE "C" CHECK (outcome IN
                    ('succeeded', 'preempted', 'failed', 'hung', 'lost', 'cancelled')),
    start_step    BIGINT,
    first_step    BIGINT,
    end_step      BIGINT,
    exit_codes_json TEXT COLLATE "C",
    log_tail      TEXT COLLATE "C",
    message       TEXT COLLATE "C",
    -- (SQLite 0003) Goodput of an attempt, written once when it ends (server/src/store/goodput.rs).
    kept_s        DOUBLE PRECISION,
    lost_s        DOUBLE PRECISION,
    overhead_s    DOUBLE PRECISION,
    kept_steps    BIGINT,
    -- (SQLite 0008) What the trainer reported of its compile, restore and saves
    -- (podq_api::TrainerPhases), totals for the attempt as the worker last sent them.
    trainer_phases_json TEXT COLLATE "C",
    -- From the worker's decision to stop to the finish, as the worker measured it.
    stopping_s    DOUBLE PRECISION,
    -- The attempt's pod time by cause (podq_api::PodTime), settled when it ends; the pod's
    -- recovery that follows a preempted, lost or hung attempt is added to it later.
    pod_time_json TEXT COLLATE "C",
    PRIMARY KEY (job_id, attempt)
);
CREATE INDEX attempts_open ON attempts (job_id) WHERE ended_at IS NULL;
-- (SQLite 0004) Pod time spent since the grant began: attempts by start time.
CREATE INDEX attempts_started ON attempts (started_at);
-- (SQLite 0008)
CREATE INDEX attempts_pod ON attempts (pod, started_at);

CREATE TABLE checkpoints (
    job_id    TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    step      BIGINT NOT NULL,
    uri       TEXT COLLATE "C" NOT NULL,
    committed BIGINT NOT NULL,
    attempt   BIGINT NOT NULL,
    seen_at   BIGINT NOT NULL,
    PRIMARY KEY (job_id, step)
);

-- One row per (job, metric name); points reference it so the big table stays narrow.
CREATE TABLE metric_series (
    id      BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    job_id  TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    name    TEXT COLLATE "C" NOT NULL,
    UNIQUE (job_id, name)
);

CREATE TABLE metric_points (
    series_id BIGINT NOT NULL REFERENCES metric_series(id),
    step      BIGINT NOT NULL,
    value     DOUBLE PRECISION NOT NULL,
    attempt   BIGINT NOT NULL,
    PRIMARY KEY (series_id, step)
);

-- SQLite's AUTOINCREMENT: ids strictly increase in commit order for the single writer.
CREATE TABLE events (
    id         BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    at         BIGINT NOT NULL,
    job_id     TEXT COLLATE "C" REFERENCES jobs(id),
    pod        TEXT COLLATE "C",
    kind       TEXT COLLATE "C" NOT NULL,
    message    TEXT COLLATE "C" NOT NULL
);
CREATE INDEX events_job ON events (job_id, id) WHERE job_id IS NOT NULL;
CREATE INDEX events_pod ON events (pod, id) WHERE pod IS NOT NULL;

CREATE TABLE pods (
    name           TEXT COLLATE "C" PRIMARY KEY,
    accelerator    TEXT COLLATE "C" NOT NULL,
    hosts          BIGINT NOT NULL,
    state          TEXT COLLATE "C" NOT NULL,
    health         TEXT COLLATE "C" NOT NULL,
    preflight_json TEXT COLLATE "C",
    recovery       TEXT COLLATE "C",
    last_seen_at   BIGINT NOT NULL,
    -- (SQLite 0008) The pod's own ledger: since when it has been in which state, so the time
    -- between attempts is charged to recovery or to idleness when the next report says which.
    -- 'between' (an attempt just ended), 'recovering_after_attempt' (right after one),
    -- 'recovering', 'ready' or 'leased'.
    ledger_state   TEXT COLLATE "C",
    ledger_since   BIGINT
);

CREATE TABLE schedules (
    id          TEXT COLLATE "C" PRIMARY KEY,
    cron        TEXT COLLATE "C" NOT NULL,
    body_json   TEXT COLLATE "C" NOT NULL,
    enabled     BIGINT NOT NULL DEFAULT 1,
    next_run_at BIGINT,
    last_run_at BIGINT,
    created_at  BIGINT NOT NULL
);

-- A POST with an Idempotency-Key stores its answer in the same transaction as its effect.
CREATE TABLE idempotency_keys (
    key            TEXT COLLATE "C" NOT NULL,
    route          TEXT COLLATE "C" NOT NULL,
    request_sha256 TEXT COLLATE "C" NOT NULL,
    status         BIGINT NOT NULL,
    response_json  TEXT COLLATE "C" NOT NULL,
    created_at     BIGINT NOT NULL,
    PRIMARY KEY (key, route)
);

-- Jobs as the API shows them (SQLite 0003's version): a linked job's state is its own column
-- (mirrored), the view still shows its run's progress unless the link was cancelled.
-- GREATEST is SQLite's scalar MAX(a, b); both arguments are never NULL here.
CREATE VIEW job_view AS
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
    COALESCE(r.id, j.id)                         AS run_id
FROM jobs j
LEFT JOIN jobs r ON r.id = j.same_as AND j.link_cancelled = 0;

-- (SQLite 0003) A linked job mirrors its run's state unless its link was cancelled. The UPDATE
-- below fires the count and fresh-queue triggers for the linked rows, as in SQLite; it fires
-- this trigger too (SQLite would not: recursive_triggers is off there), but never past its
-- WHEN, since every row it changes has a same_as, so it ends after one level.
CREATE FUNCTION jobs_mirror_state() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE jobs SET state = NEW.state WHERE same_as = NEW.id AND link_cancelled = 0;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_mirror_state AFTER UPDATE OF state ON jobs
FOR EACH ROW WHEN (NEW.same_as IS NULL AND NEW.state IS DISTINCT FROM OLD.state)
EXECUTE FUNCTION jobs_mirror_state();

-- (SQLite 0003) Jobs per (group, state) as the API shows them, kept up to date in the
-- transaction that changes a state; linked jobs are counted in their run's state.
CREATE TABLE job_counts (
    group_name TEXT COLLATE "C" NOT NULL,
    state      TEXT COLLATE "C" NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (group_name, state)
);

CREATE FUNCTION jobs_count_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_counts VALUES (NEW.group_name, NEW.state, 0) ON CONFLICT DO NOTHING;
    UPDATE job_counts SET n = n + 1 WHERE group_name = NEW.group_name AND state = NEW.state;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_count_insert AFTER INSERT ON jobs
FOR EACH ROW EXECUTE FUNCTION jobs_count_insert();

CREATE FUNCTION jobs_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE group_name = OLD.group_name AND state = OLD.state;
    INSERT INTO job_counts VALUES (NEW.group_name, NEW.state, 0) ON CONFLICT DO NOTHING;
    UPDATE job_counts SET n = n + 1 WHERE group_name = NEW.group_name AND state = NEW.state;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_count_update AFTER UPDATE OF state ON jobs
FOR EACH ROW WHEN (NEW.state IS DISTINCT FROM OLD.state)
EXECUTE FUNCTION jobs_count_update();

CREATE FUNCTION jobs_count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE group_name = OLD.group_name AND state = OLD.state;
    RETURN NULL;
END;
$$;
CREATE TRIGGER jobs_count_delete AFTER DELETE ON jobs
FOR EACH ROW EXECUTE FUNCTION jobs_count_delete();

-- (SQLite 0003) The goodput sum over every ended attempt, kept by trigger so status never sums
-- the history.
CREATE TABLE goodput_totals (
    id         BIGINT PRIMARY KEY CHECK (id = 1),
    kept_s     DOUBLE PRECISION NOT NULL,
    lost_s     DOUBLE PRECISION NOT NULL,
    overhead_s DOUBLE PRECISION NOT NULL,
    kept_steps BIGINT NOT NULL
);
INSERT INTO goodput_totals VALUES (1, 0, 0, 0, 0);

CREATE FUNCTION attempts_goodput_total() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE goodput_totals SET kept_s = kept_s + NEW.kept_s, lost_s = lost_s + NEW.lost_s,
        overhead_s = overhead_s + NEW.overhead_s, kept_steps = kept_steps + NEW.kept_steps
    WHERE id = 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER attempts_goodput_total AFTER UPDATE OF kept_s ON attempts
FOR EACH ROW WHEN (OLD.kept_s IS NULL AND NEW.kept_s IS NOT NULL)
EXECUTE FUNCTION attempts_goodput_total();

-- (SQLite 0004) The compute grant the plan measures against (PUT /api/v1/grant). One row at
-- most.
CREATE TABLE grant_terms (
    id             BIGINT PRIMARY KEY CHECK (id = 1),
    start_at       BIGINT NOT NULL,
    end_at         BIGINT NOT NULL,
    pod_hours_json TEXT COLLATE "C" NOT NULL,
    updated_at     BIGINT NOT NULL
);

-- (SQLite 0005) Webhooks: the receivers configured at start-up (their secrets stay in the
-- config file, not here), and an outbox of deliveries. The trigger queues a delivery in the
-- transaction that writes the event, so a change and its notice are committed together or not
-- at all.
CREATE TABLE webhooks (
    id         BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    url        TEXT COLLATE "C" NOT NULL UNIQUE,
    format     TEXT COLLATE "C" NOT NULL CHECK (format IN ('json', 'slack')),
    kinds_json TEXT COLLATE "C" NOT NULL,
    enabled    BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE webhook_outbox (
    id              BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    webhook_id      BIGINT NOT NULL REFERENCES webhooks(id),
    event_id        BIGINT NOT NULL REFERENCES events(id),
    attempts        BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    delivered_at    BIGINT,
    last_error      TEXT COLLATE "C",
    UNIQUE (webhook_id, event_id)
);
-- Each webhook's oldest undelivered notice, found by index.
CREATE INDEX webhook_outbox_pending ON webhook_outbox (webhook_id, id) WHERE delivered_at IS NULL;

-- kinds_json is a JSON array of event kinds. The deliveries are inserted (and so numbered) in
-- SQLite's order: by webhook id, then by position in the array.
CREATE FUNCTION events_to_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_outbox (webhook_id, event_id, next_attempt_at)
    SELECT w.id, NEW.id, NEW.at
    FROM webhooks w
    CROSS JOIN LATERAL jsonb_array_elements_text(w.kinds_json::jsonb) WITH ORDINALITY AS k(value, ord)
    WHERE w.enabled = 1 AND k.value = NEW.kind
    ORDER BY w.id, k.ord;
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_to_webhooks AFTER INSERT ON events
FOR EACH ROW EXECUTE FUNCTION events_to_webhooks();

-- (SQLite 0006) The queued runs that never reported a step, counted and summed for status: a
-- deep queue is mostly those, and status read every one of them after every change (issue
-- 18). Kept by triggers in the transaction of each change, as job_counts are.
CREATE TABLE fresh_queue (
    id    BIGINT PRIMARY KEY CHECK (id = 1),
    n     BIGINT NOT NULL,
    hours DOUBLE PRECISION NOT NULL
);
INSERT INTO fresh_queue SELECT 1, COUNT(*), COALESCE(SUM(est_hours), 0.0) FROM jobs
    WHERE state = 'queued' AND same_as IS NULL AND last_step IS NULL;

CREATE FUNCTION fresh_queue_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours WHERE id = 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER fresh_queue_insert AFTER INSERT ON jobs
FOR EACH ROW WHEN (NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.last_step IS NULL)
EXECUTE FUNCTION fresh_queue_insert();

CREATE FUNCTION fresh_queue_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours
        WHERE id = 1 AND OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.last_step IS NULL;
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours
        WHERE id = 1 AND NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.last_step IS NULL;
    RETURN NULL;
END;
$$;
CREATE TRIGGER fresh_queue_update AFTER UPDATE OF state, same_as, last_step, est_hours ON jobs
FOR EACH ROW EXECUTE FUNCTION fresh_queue_update();

CREATE FUNCTION fresh_queue_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours WHERE id = 1;
    RETURN NULL;
END;
$$;
CREATE TRIGGER fresh_queue_delete AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.last_step IS NULL)
EXECUTE FUNCTION fresh_queue_delete();

-- (SQLite 0007) The lines every host's trainer printed, per job (the run's job), attempt and
-- host, as workers forward them while the attempt runs (issue 18). "offset" is the line's byte
-- offset in that host's output for the attempt: an agent that pushes its log again after a
-- worker restart sends the same offsets, so a line is stored once. `id` orders lines as they
-- arrived and is the cursor of `GET /jobs/{id}/logs?after=`.
CREATE TABLE log_lines (
    id       BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    job_id   TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    attempt  BIGINT NOT NULL,
    host     BIGINT NOT NULL,
    "offset" BIGINT NOT NULL,
    at       BIGINT NOT NULL,
    text     TEXT COLLATE "C" NOT NULL
);
CREATE UNIQUE INDEX log_lines_by_host ON log_lines (job_id, attempt, host, "offset");
CREATE INDEX log_lines_by_arrival ON log_lines (job_id, id);

-- Per job, attempt and host: lines kept and lines dropped (oldest first) to stay under the
-- server's cap. Kept in the transaction that inserts, so trimming never counts rows. A line
-- below `floor` (the oldest offset kept) was dropped: sent again, it is not stored.
CREATE TABLE log_counts (
    job_id  TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    attempt BIGINT NOT NULL,
    host    BIGINT NOT NULL,
    kept    BIGINT NOT NULL,
    dropped BIGINT NOT NULL,
    floor   BIGINT NOT NULL,
    PRIMARY KEY (job_id, attempt, host)
);

-- (SQLite 0008) Issue 19: where pod time goes, by cause. Running sums of settled pod time, so
-- no read adds up the history. Scopes: 'all', 'pod:NAME', 'group:NAME', 'accelerator:TYPE'.
-- `attempt_s` and `interruptions` (attempts ended preempted or lost) give a pod type's mean
-- time between interruptions.
CREATE TABLE pod_time_totals (
    scope         TEXT COLLATE "C" PRIMARY KEY,
    pod_time_json TEXT COLLATE "C" NOT NULL,
    attempt_s     DOUBLE PRECISION NOT NULL DEFAULT 0,
    interruptions BIGINT NOT NULL DEFAULT 0
);

-- SQLite's two-argument scalar MAX(a, b), so the same SQL text runs on both stores. STRICT:
-- like SQLite's, it is NULL when either argument is (GREATEST would skip the NULL).
-- https://sqlite.org/lang_corefunc.html#max_scalar
CREATE FUNCTION max(a BIGINT, b BIGINT) RETURNS BIGINT
    LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT GREATEST(a, b)';
CREATE FUNCTION max(a DOUBLE PRECISION, b DOUBLE PRECISION) RETURNS DOUBLE PRECISION
    LANGUAGE SQL IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT GREATEST(a, b)';
