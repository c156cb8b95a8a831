-- Issue 68: a record per interruption (store/recoveries.rs derives it from the interrupted
-- attempt, the next one and the pods they ran on).
-- Where a pool made the pod, when it began making it, and when its worker first described
-- it usable: the part of a run's wait that was a slice being made.
ALTER TABLE pods ADD COLUMN zone TEXT;
ALTER TABLE pods ADD COLUMN made_at BIGINT;
ALTER TABLE pods ADD COLUMN ready_at BIGINT;
-- The interrupted attempts, newest first, without walking every attempt.
CREATE INDEX attempts_interrupted ON attempts (ended_at)
    WHERE outcome IN ('preempted', 'lost') OR cause IN ('evicted', 'suspended');
