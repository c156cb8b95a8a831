-- The compute grant the plan measures against (PUT /api/v1/grant). One row at most.
CREATE TABLE grant_terms (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    start_at       INTEGER NOT NULL,
    end_at         INTEGER NOT NULL,
    pod_hours_json TEXT NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- Pod time spent since the grant began: attempts by start time.
CREATE INDEX attempts_started ON attempts (started_at);
