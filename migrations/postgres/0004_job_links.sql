-- Issue 28, part 4 (SQLite 0011): where a job's run lives elsewhere. The comments of
-- migrations/sqlite/0011_job_links.sql apply.
CREATE TABLE job_links (
    job_id  TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    name    TEXT COLLATE "C" NOT NULL,
    url     TEXT COLLATE "C" NOT NULL,
    attempt BIGINT NOT NULL,
    at      BIGINT NOT NULL,
    PRIMARY KEY (job_id, name)
);
