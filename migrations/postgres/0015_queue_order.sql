-- The queue in its own order, whatever the slice type; the SQLite migration 0023 says why.
CREATE INDEX jobs_queue_order ON jobs (state, class_rank, queue_head DESC, priority DESC, seq)
    WHERE same_as IS NULL;
