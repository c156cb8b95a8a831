-- Issue 41: a log chunk is found by its job, batch and host, which are unique to it, and by
-- nothing else. A thousand pods store some 4,000 chunks a second, and each chunk's entries
-- in `log_chunks_by_arrival` and `log_chunks_by_host` were most of what storing it cost:
-- B-tree inserts on the writer, and on PostgreSQL 2 of every 5 bytes the chunks took. Reads
-- seek a job's chunks by batch; the one search by host, trimming a host to its cap of
-- lines, seeks by batch too, from the host's oldest batch kept, now counted beside its lines
-- (`log_counts.floor_batch`; 0 for counts from before, a bound that holds for any chunk).
-- The id column had no use left. SQLite cannot drop a key's column, so the table is made
-- again, WITHOUT ROWID: the key is the table's one B-tree, as `metric_chunks`' is, where a
-- rowid table would be a second. A chunk is some 100 bytes (a few lines, compressed), well
-- inside what such a table is made for (https://www.sqlite.org/withoutrowid.html, "When To
-- Use WITHOUT ROWID": rows under about a twentieth of a page).
CREATE TABLE log_chunks_by_batch (
    job_seq      INTEGER NOT NULL REFERENCES jobs(seq),
    batch        INTEGER NOT NULL,
    host         INTEGER NOT NULL,
    attempt      INTEGER NOT NULL,
    first_offset INTEGER NOT NULL,
    lines        INTEGER NOT NULL,
    last_at      INTEGER NOT NULL,
    data         BLOB NOT NULL,
    PRIMARY KEY (job_seq, batch, host)
) WITHOUT ROWID;
INSERT INTO log_chunks_by_batch (job_seq, batch, host, attempt, first_offset, lines, last_at, data)
    SELECT job_seq, batch, host, attempt, first_offset, lines, last_at, data
    FROM log_chunks ORDER BY job_seq, batch, host;
DROP TABLE log_chunks;
ALTER TABLE log_chunks_by_batch RENAME TO log_chunks;
ALTER TABLE log_counts ADD COLUMN floor_batch INTEGER NOT NULL DEFAULT 0;
