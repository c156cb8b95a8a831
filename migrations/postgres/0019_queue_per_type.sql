-- A queue per slice type; the SQLite migration 0027 says why.
ALTER TABLE job_accelerators
    ADD COLUMN queued BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN class_rank BIGINT NOT NULL DEFAULT 1,
    ADD COLUMN queue_head BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN priority BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN seq BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN later_choice BIGINT NOT NULL DEFAULT 0;

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

CREATE FUNCTION job_accelerators_queue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_accelerators SET
        queued = CASE WHEN NEW.state = 'queued' AND NEW.same_as IS NULL THEN 1 ELSE 0 END,
        class_rank = NEW.class_rank, queue_head = NEW.queue_head, priority = NEW.priority,
        seq = NEW.seq
    WHERE job_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER job_accelerators_queue AFTER UPDATE OF state, same_as, class_rank, queue_head, priority ON jobs
FOR EACH ROW WHEN (((OLD.state = 'queued' AND OLD.same_as IS NULL) OR (NEW.state = 'queued' AND NEW.same_as IS NULL))
    AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.same_as IS DISTINCT FROM NEW.same_as
        OR OLD.class_rank <> NEW.class_rank OR OLD.queue_head <> NEW.queue_head
        OR OLD.priority <> NEW.priority))
EXECUTE FUNCTION job_accelerators_queue();
