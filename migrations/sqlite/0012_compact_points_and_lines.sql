-- Issue 30: metric points and log lines stored in the shape they arrive in (store/chunks.rs).
-- A row per metric value and per log line, each with its indexes, made a batch a hundred
-- B-tree inserts and most of the store's growth. The rows of the old tables are moved into
-- these by the server at its first start on this schema, before it serves
-- (store/compact.rs), which then drops `metric_points` and `log_lines`.

-- The newest step any chunk of the series holds: a batch that starts after it cannot
-- overlap the stored ones (the common case, decided without reading a chunk).
ALTER TABLE metric_series ADD COLUMN last_step INTEGER;
-- What `last_step` was before the latest batch: the series upsert sets it and returns it
-- (RETURNING sees the row as updated, and every SET expression the row as it was).
ALTER TABLE metric_series ADD COLUMN previous INTEGER;

-- A series' points from one reported batch, encoded. A series' chunks cover disjoint step
-- ranges: a batch that reports a step again is merged with the chunks its range overlaps,
-- the newest value of each step winning (store/metrics.rs).
CREATE TABLE metric_chunks (
    series_id  INTEGER NOT NULL REFERENCES metric_series(id),
    last_step  INTEGER NOT NULL,
    first_step INTEGER NOT NULL,
    points     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (series_id, last_step)
) WITHOUT ROWID;

-- One host's lines from one forwarded batch, encoded. `batch` numbers a job's batches as
-- they arrived; each line keeps its place in its batch across hosts, and a line's id, the
-- cursor of `GET /jobs/{id}/logs?after=`, is `batch * 65536 + place` (store/logs.rs), so
-- lines read back in the order the worker sent them, and dropping a chunk's oldest lines
-- changes no other line's id.
CREATE TABLE log_chunks (
    id           INTEGER PRIMARY KEY,
    job_id       TEXT NOT NULL REFERENCES jobs(id),
    batch        INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    host         INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    lines        INTEGER NOT NULL,
    last_at      INTEGER NOT NULL,
    data         BLOB NOT NULL
);
CREATE INDEX log_chunks_by_arrival ON log_chunks (job_id, batch, id);
CREATE INDEX log_chunks_by_host ON log_chunks (job_id, attempt, host, first_offset);

-- The highest offset stored per host: a line at or below it was stored already (or
-- dropped), so a resent line is stored once.
ALTER TABLE log_counts ADD COLUMN top INTEGER NOT NULL DEFAULT -1;
