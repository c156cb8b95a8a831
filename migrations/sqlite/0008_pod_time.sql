-- Issue 19: where pod time goes, by cause.

-- What the trainer reported of its compile, restore and saves (podq_api::TrainerPhases),
-- totals for the attempt as the worker last sent them.
ALTER TABLE attempts ADD COLUMN trainer_phases_json TEXT;
-- From the worker's decision to stop to the finish, as the worker measured it.
ALTER TABLE attempts ADD COLUMN stopping_s REAL;
-- The attempt's pod time by cause (podq_api::PodTime), settled when it ends; the pod's
-- recovery that follows a preempted, lost or hung attempt is added to it later.
ALTER TABLE attempts ADD COLUMN pod_time_json TEXT;
CREATE INDEX attempts_pod ON attempts (pod, started_at);

-- The pod's own ledger: since when it has been in which state, so the time between
-- attempts is charged to recovery or to idleness when the next report says which.
-- 'between' (an attempt just ended), 'recovering_after_attempt' (right after one),
-- 'recovering', 'ready' or 'leased'.
ALTER TABLE pods ADD COLUMN ledger_state TEXT;
ALTER TABLE pods ADD COLUMN ledger_since INTEGER;

-- Running sums of settled pod time, so no read adds up the history. Scopes: 'all',
-- 'pod:NAME', 'group:NAME', 'accelerator:TYPE'. `attempt_s` and `interruptions` (attempts
-- ended preempted or lost) give a pod type's mean time between interruptions.
CREATE TABLE pod_time_totals (
    scope         TEXT PRIMARY KEY,
    pod_time_json TEXT NOT NULL,
    attempt_s     REAL NOT NULL DEFAULT 0,
    interruptions INTEGER NOT NULL DEFAULT 0
);
