-- A job may lease pods of several slice types, most preferred first (a group's
-- `accelerators:`); `jobs.accelerator` stays its first. The claim for a pod of type A finds
-- the jobs whose list holds A here (store/leases.rs, `claim`).
CREATE TABLE job_accelerators (
    job_id      TEXT NOT NULL REFERENCES jobs(id),
    accelerator TEXT NOT NULL,
    preference  INTEGER NOT NULL,
    -- The claim walks the queue in its own order and asks, for each job, whether its list
    -- holds the pod's type: one lookup here.
    PRIMARY KEY (job_id, accelerator)
);
INSERT INTO job_accelerators (job_id, accelerator, preference)
    SELECT id, accelerator, 0 FROM jobs;

-- The slice type each attempt ran on: a run may move between generations. Every attempt
-- before this one ran on its job's only type.
ALTER TABLE attempts ADD COLUMN accelerator TEXT;
UPDATE attempts SET accelerator = (SELECT j.accelerator FROM jobs j WHERE j.id = attempts.job_id);
