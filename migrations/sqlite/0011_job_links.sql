-- Issue 28, part 4: where a job's run lives elsewhere (its W&B run, say), as its trainer
-- reported with `PODQ {"event":"link",...}`. One row per job and name: the newest URL wins,
-- and the row outlives the attempt that reported it. `attempt` is the attempt that reported
-- the URL kept, `at` when (ms).
CREATE TABLE job_links (
    job_id  TEXT NOT NULL REFERENCES jobs(id),
    name    TEXT NOT NULL,
    url     TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    at      INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
);
