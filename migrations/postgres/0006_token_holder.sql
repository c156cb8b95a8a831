-- Issue 38: whose token made a change; the SQLite migration 0013 says why.
ALTER TABLE events ADD COLUMN token_holder TEXT;
