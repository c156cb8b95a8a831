-- Issue 41: a report's newest points are stored together, by job, until a series has enough
-- of them to be worth a chunk of its own; the SQLite migration 0019 says why. On PostgreSQL
-- the saving is in the primary key's index, whose leaves are laid out as SQLite's table is.
CREATE TABLE metric_tail (
    job_seq    BIGINT NOT NULL REFERENCES jobs(seq),
    last_step  BIGINT NOT NULL,
    series_id  BIGINT NOT NULL REFERENCES metric_series(id),
    first_step BIGINT NOT NULL,
    points     BIGINT NOT NULL,
    attempt    BIGINT NOT NULL,
    data       BYTEA NOT NULL,
    PRIMARY KEY (job_seq, last_step, series_id)
);
ALTER TABLE metric_series ADD COLUMN tail BIGINT NOT NULL DEFAULT 0;
