-- The queued runs that never reported a step, counted and summed for status: a deep queue
-- is mostly those, and status read every one of them after every change (issue 18). Kept
-- by triggers in the transaction of each change, as job_counts are.
CREATE TABLE fresh_queue (
    id    INTEGER PRIMARY KEY CHECK (id = 1),
    n     INTEGER NOT NULL,
    hours REAL NOT NULL
);
INSERT INTO fresh_queue SELECT 1, COUNT(*), COALESCE(SUM(est_hours), 0.0) FROM jobs
    WHERE state = 'queued' AND same_as IS NULL AND last_step IS NULL;

CREATE TRIGGER fresh_queue_insert AFTER INSERT ON jobs
WHEN NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.last_step IS NULL
BEGIN
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours WHERE id = 1;
END;

CREATE TRIGGER fresh_queue_update AFTER UPDATE OF state, same_as, last_step, est_hours ON jobs
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours
        WHERE id = 1 AND OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.last_step IS NULL;
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours
        WHERE id = 1 AND NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.last_step IS NULL;
END;

CREATE TRIGGER fresh_queue_delete AFTER DELETE ON jobs
WHEN OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.last_step IS NULL
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours WHERE id = 1;
END;

-- Queued runs that made progress before, in lease order: few, whatever the depth of the queue.
CREATE INDEX jobs_progressed_queue ON jobs (priority DESC, seq)
    WHERE state = 'queued' AND same_as IS NULL AND last_step IS NOT NULL;
