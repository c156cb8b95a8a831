-- The queue in its own order, whatever the slice type: the claim walks it to the first job
-- whose list (job_accelerators) holds the pod's type (store/leases.rs, `queue_head`), so
-- the claim reads a row or a few however deep the queue, not every queued job.
CREATE INDEX jobs_queue_order ON jobs (state, class_rank, queue_head DESC, priority DESC, seq)
    WHERE same_as IS NULL;
