-- Which pool made a pod, and when the server first saw it in that pool's report: a pool's
-- share of the grant is what the server saw of its slices (first seen → retired), not a
-- number the pool asserts (scheduler/pools.rs, `pool_hours`).
ALTER TABLE pods ADD COLUMN pool TEXT;
ALTER TABLE pods ADD COLUMN pool_seen_at INTEGER;
CREATE INDEX pods_by_pool ON pods (pool) WHERE pool IS NOT NULL;
