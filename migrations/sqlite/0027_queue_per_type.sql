-- A queue per slice type. The claim for a pod of type A walked the whole queue in its order
-- (jobs_queue_order) and asked each job whether its list holds A: a type few jobs list, or
-- none, read every queued job of the other types (40,000 jobs made 64 waiting pods cut the
-- submits a second by three quarters; docs/performance.md). Each row of a job's list now
-- carries what the queue is ordered by, kept equal to its job's by the trigger below while
-- the job is in the queue or leaves it, and the claim walks only the rows of its type
-- (store/leases.rs, `queue_head`), in the queue's order: class, an evicted job at the head of
-- its class, priority, the job's first choice before its later ones, submission.
ALTER TABLE job_accelerators ADD COLUMN queued INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_accelerators ADD COLUMN class_rank INTEGER NOT NULL DEFAULT 1;
ALTER TABLE job_accelerators ADD COLUMN queue_head INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_accelerators ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_accelerators ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_accelerators ADD COLUMN later_choice INTEGER NOT NULL DEFAULT 0;

UPDATE job_accelerators SET
    queued = CASE WHEN j.state = 'queued' AND j.same_as IS NULL THEN 1 ELSE 0 END,
    class_rank = j.class_rank,
    queue_head = j.queue_head,
    priority = j.priority,
    seq = j.seq,
    later_choice = CASE WHEN job_accelerators.preference > 0 THEN 1 ELSE 0 END
FROM jobs j WHERE j.id = job_accelerators.job_id;

CREATE INDEX job_accelerators_queue
    ON job_accelerators (accelerator, class_rank, queue_head DESC, priority DESC, later_choice, seq)
    WHERE queued = 1;

-- A job that is leasable-queued before or after the change (queued and not linked): its rows
-- follow it. A job that stays out of the queue is left alone; it is copied whole when it
-- comes back. A new job's rows are written with its values (store/job_accelerators.rs).
CREATE TRIGGER job_accelerators_queue AFTER UPDATE OF state, same_as, class_rank, queue_head, priority ON jobs
WHEN ((OLD.state = 'queued' AND OLD.same_as IS NULL) OR (NEW.state = 'queued' AND NEW.same_as IS NULL))
    AND (OLD.state IS NOT NEW.state OR OLD.same_as IS NOT NEW.same_as
        OR OLD.class_rank <> NEW.class_rank OR OLD.queue_head <> NEW.queue_head
        OR OLD.priority <> NEW.priority)
BEGIN
    UPDATE job_accelerators SET
        queued = CASE WHEN NEW.state = 'queued' AND NEW.same_as IS NULL THEN 1 ELSE 0 END,
        class_rank = NEW.class_rank, queue_head = NEW.queue_head, priority = NEW.priority,
        seq = NEW.seq
    WHERE job_id = NEW.id;
END;
