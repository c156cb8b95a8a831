-- A pod holds one live lease, whatever its job's state: a cancelled job keeps its lease (and
-- `lease_pod`) until its worker ends the attempt, and the claim refuses a pod that holds any
-- (store/leases.rs, `claim`). The claim's guard looks a pod's live lease up here.
DROP INDEX jobs_live_pod;
CREATE INDEX jobs_live_pod ON jobs (lease_pod) WHERE lease_pod IS NOT NULL;
