-- The claim checks that the pod holds no live lease: find a pod's live jobs by index.
CREATE INDEX jobs_live_pod ON jobs (lease_pod) WHERE state IN ('leased', 'running');
