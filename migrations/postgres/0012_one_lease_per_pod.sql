-- A pod holds one live lease, whatever its job's state; the SQLite migration 0020 says why.
DROP INDEX jobs_live_pod;
CREATE INDEX jobs_live_pod ON jobs (lease_pod) WHERE lease_pod IS NOT NULL;
