-- Issue 28 let two things in that the first schema refused: the `stopped` job state, and a
-- NaN metric value (which SQLite stores as NULL). SQLite has no ALTER COLUMN. For "removing
-- CHECK or FOREIGN KEY or NOT NULL constraints" sqlite.org documents rewriting the table's
-- definition in place (https://www.sqlite.org/lang_altertable.html#otheralter) rather than
-- rebuilding `jobs` with its indexes and triggers; widening a CHECK's list removes the old
-- constraint for one that admits more, so the procedure applies. Each edit only lets more
-- rows in, so no stored row can break it.
--
-- Before this migration the server made these edits at every start; a file it edited then
-- has nothing left to change here (the WHERE clauses find nothing). `metric_points` is gone
-- from a file compacted since (store/compact.rs). The server reconnects after migrating, so
-- its connections parse the new definitions, which is what the procedure's schema_version
-- bump is for.
PRAGMA writable_schema = ON;
UPDATE sqlite_master
   SET sql = replace(sql, '''cancelled'', ''held'')', '''cancelled'', ''held'', ''stopped'')')
 WHERE type = 'table' AND name = 'jobs' AND instr(sql, '''stopped''') = 0;
UPDATE sqlite_master
   SET sql = replace(sql, 'value     REAL NOT NULL,', 'value     REAL,')
 WHERE type = 'table' AND name = 'metric_points';
PRAGMA writable_schema = OFF;
