-- Rungs across a group (scheduler/lease/rungs.rs). A run's value at each rung it reached, and
-- the standing decision about it there: a pause is replaced by the promotion or the prune
-- that ends it, in the same transaction that judged the value, so a server killed
-- mid-decision leaves no run both promoted and pruned and loses no decision.
CREATE TABLE rung_values (
    job_id TEXT NOT NULL REFERENCES jobs(id),
    rung   INTEGER NOT NULL,
    -- The step the value was reported at; NULL with the value when the run passed the rung
    -- without one.
    step   INTEGER,
    value  REAL,
    PRIMARY KEY (job_id, rung)
);
CREATE TABLE rung_decisions (
    job_id     TEXT NOT NULL REFERENCES jobs(id),
    rung       INTEGER NOT NULL,
    verdict    TEXT NOT NULL CHECK (verdict IN ('promoted', 'paused', 'pruned', 'no_value')),
    rank       INTEGER,
    of_runs    INTEGER,
    value      REAL,
    decided_at INTEGER NOT NULL,
    decided_by TEXT NOT NULL,
    PRIMARY KEY (job_id, rung)
);
