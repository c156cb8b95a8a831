-- Issue 41: a run's progress no longer blocks in-place (HOT) updates of its job; the SQLite
-- migration 0016 says why. The functions keep their names; only the column they read moves.
ALTER TABLE jobs ADD COLUMN progressed BIGINT NOT NULL DEFAULT 0 CHECK (progressed IN (0, 1));
UPDATE jobs SET progressed = 1 WHERE last_step IS NOT NULL;
-- Room on each page for a row's next version, so that a HOT update stays on its page
-- (https://www.postgresql.org/docs/15/sql-createtable.html#RELOPTION-FILLFACTOR). Pages
-- written from now on; old ones gain it as rows move.
ALTER TABLE jobs SET (fillfactor = 80);

DROP INDEX jobs_progressed_queue;
CREATE INDEX jobs_progressed_queue ON jobs (priority DESC, seq)
    WHERE state = 'queued' AND same_as IS NULL AND progressed = 1;

DROP TRIGGER fresh_queue_insert ON jobs;
DROP TRIGGER fresh_queue_update ON jobs;
DROP TRIGGER fresh_queue_delete ON jobs;

CREATE OR REPLACE FUNCTION fresh_queue_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours
        WHERE id = 1 AND OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.progressed = 0;
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours
        WHERE id = 1 AND NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.progressed = 0;
    RETURN NULL;
END;
$$;

CREATE TRIGGER fresh_queue_insert AFTER INSERT ON jobs
FOR EACH ROW WHEN (NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.progressed = 0)
EXECUTE FUNCTION fresh_queue_insert();
CREATE TRIGGER fresh_queue_update AFTER UPDATE OF state, same_as, progressed, est_hours ON jobs
FOR EACH ROW EXECUTE FUNCTION fresh_queue_update();
CREATE TRIGGER fresh_queue_delete AFTER DELETE ON jobs
FOR EACH ROW WHEN (OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.progressed = 0)
EXECUTE FUNCTION fresh_queue_delete();
