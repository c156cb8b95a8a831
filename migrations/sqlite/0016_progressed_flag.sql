-- Issue 41: a queued run "made progress before" is now a flag set once, `progressed`, not
-- `last_step IS NOT NULL`. Every metrics report writes `last_step`; as long as an index's
-- predicate and the fresh-queue triggers read it, PostgreSQL can never update a job's row in
-- place (a HOT update needs every indexed column, predicates included, unchanged:
-- https://www.postgresql.org/docs/15/storage-hot.html), so each report wrote a new row
-- version and an entry in each of the table's indexes. The flag only changes at a run's
-- first report. SQLite keeps the same schema so that both stores run the same statements.
ALTER TABLE jobs ADD COLUMN progressed INTEGER NOT NULL DEFAULT 0 CHECK (progressed IN (0, 1));
UPDATE jobs SET progressed = 1 WHERE last_step IS NOT NULL;

DROP INDEX jobs_progressed_queue;
CREATE INDEX jobs_progressed_queue ON jobs (priority DESC, seq)
    WHERE state = 'queued' AND same_as IS NULL AND progressed = 1;

DROP TRIGGER fresh_queue_insert;
DROP TRIGGER fresh_queue_update;
DROP TRIGGER fresh_queue_delete;

CREATE TRIGGER fresh_queue_insert AFTER INSERT ON jobs
WHEN NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.progressed = 0
BEGIN
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours WHERE id = 1;
END;

CREATE TRIGGER fresh_queue_update AFTER UPDATE OF state, same_as, progressed, est_hours ON jobs
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours
        WHERE id = 1 AND OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.progressed = 0;
    UPDATE fresh_queue SET n = n + 1, hours = hours + NEW.est_hours
        WHERE id = 1 AND NEW.state = 'queued' AND NEW.same_as IS NULL AND NEW.progressed = 0;
END;

CREATE TRIGGER fresh_queue_delete AFTER DELETE ON jobs
WHEN OLD.state = 'queued' AND OLD.same_as IS NULL AND OLD.progressed = 0
BEGIN
    UPDATE fresh_queue SET n = n - 1, hours = hours - OLD.est_hours WHERE id = 1;
END;
