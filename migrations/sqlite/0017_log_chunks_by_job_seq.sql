-- Issue 41: a job's log chunks are found by the job's integer `seq`, not by its 36-character
-- id. A thousand pods store some 4,000 chunks a second, each with an entry in both indexes
-- below: keyed on the text id, those indexes were as large as the chunks they index, and
-- most of a fleet's store growth on PostgreSQL. `seq` is the job's and never changes.
-- SQLite cannot drop a column a foreign key names, so the table is made again.
CREATE TABLE log_chunks_by_seq (
    id           INTEGER PRIMARY KEY,
    job_seq      INTEGER NOT NULL REFERENCES jobs(seq),
    batch        INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    host         INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    lines        INTEGER NOT NULL,
    last_at      INTEGER NOT NULL,
    data         BLOB NOT NULL
);
INSERT INTO log_chunks_by_seq (id, job_seq, batch, attempt, host, first_offset, lines, last_at, data)
    SELECT c.id, j.seq, c.batch, c.attempt, c.host, c.first_offset, c.lines, c.last_at, c.data
    FROM log_chunks c JOIN jobs j ON j.id = c.job_id;
DROP TABLE log_chunks;
ALTER TABLE log_chunks_by_seq RENAME TO log_chunks;
CREATE INDEX log_chunks_by_arrival ON log_chunks (job_seq, batch, id);
CREATE INDEX log_chunks_by_host ON log_chunks (job_seq, attempt, host, first_offset);
