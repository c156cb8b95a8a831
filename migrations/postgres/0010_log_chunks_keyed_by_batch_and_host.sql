-- Issue 41: a log chunk is found by its job, batch and host, which are unique to it, and by
-- nothing else; the SQLite migration 0018 says why. Made again, not altered in place, which
-- would leave a dead version of every row behind.
CREATE TABLE log_chunks_by_batch (
    job_seq      BIGINT NOT NULL REFERENCES jobs(seq),
    batch        BIGINT NOT NULL,
    host         BIGINT NOT NULL,
    attempt      BIGINT NOT NULL,
    first_offset BIGINT NOT NULL,
    lines        BIGINT NOT NULL,
    last_at      BIGINT NOT NULL,
    data         BYTEA NOT NULL,
    PRIMARY KEY (job_seq, batch, host)
);
INSERT INTO log_chunks_by_batch (job_seq, batch, host, attempt, first_offset, lines, last_at, data)
    SELECT job_seq, batch, host, attempt, first_offset, lines, last_at, data
    FROM log_chunks ORDER BY job_seq, batch, host;
DROP TABLE log_chunks;
ALTER TABLE log_chunks_by_batch RENAME TO log_chunks;
ALTER INDEX log_chunks_by_batch_pkey RENAME TO log_chunks_pkey;
ALTER TABLE log_chunks RENAME CONSTRAINT log_chunks_by_batch_job_seq_fkey TO log_chunks_job_seq_fkey;
ALTER TABLE log_counts ADD COLUMN floor_batch BIGINT NOT NULL DEFAULT 0;
