-- The lines every host's trainer printed, per job (the run's job), attempt and host, as
-- workers forward them while the attempt runs (issue 18). `offset` is the line's byte offset
-- in that host's output for the attempt: an agent that pushes its log again after a worker
-- restart sends the same offsets, so a line is stored once. `id` orders lines as they
-- arrived and is the cursor of `GET /jobs/{id}/logs?after=`.
CREATE TABLE log_lines (
    id      INTEGER PRIMARY KEY,
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL,
    host    INTEGER NOT NULL,
    offset  INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    text    TEXT NOT NULL
);
CREATE UNIQUE INDEX log_lines_by_host ON log_lines (job_id, attempt, host, offset);
CREATE INDEX log_lines_by_arrival ON log_lines (job_id, id);

-- Per job, attempt and host: lines kept and lines dropped (oldest first) to stay under the
-- server's cap. Kept in the transaction that inserts, so trimming never counts rows. A
-- line below `floor` (the oldest offset kept) was dropped: sent again, it is not stored.
CREATE TABLE log_counts (
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    attempt INTEGER NOT NULL,
    host    INTEGER NOT NULL,
    kept    INTEGER NOT NULL,
    dropped INTEGER NOT NULL,
    floor   INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt, host)
) WITHOUT ROWID;
