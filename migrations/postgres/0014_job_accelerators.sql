-- A job may lease pods of several slice types; the SQLite migration 0022 says why.
CREATE TABLE job_accelerators (
    job_id      TEXT COLLATE "C" NOT NULL REFERENCES jobs(id),
    accelerator TEXT COLLATE "C" NOT NULL,
    preference  BIGINT NOT NULL,
    PRIMARY KEY (job_id, accelerator)
);
INSERT INTO job_accelerators (job_id, accelerator, preference)
    SELECT id, accelerator, 0 FROM jobs;

ALTER TABLE attempts ADD COLUMN accelerator TEXT COLLATE "C";
UPDATE attempts a SET accelerator = j.accelerator FROM jobs j WHERE j.id = a.job_id;
