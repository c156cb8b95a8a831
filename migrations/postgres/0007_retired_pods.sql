-- Issue 40: pods a pool gave back; the SQLite migration 0014 says why.
ALTER TABLE pods ADD COLUMN retired_at BIGINT;
