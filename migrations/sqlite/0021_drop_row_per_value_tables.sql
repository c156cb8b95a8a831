-- The tables older versions kept a row per metric value and per log line in. Their rows
-- were moved into chunks (store/compact.rs) at start-up, after the migrations before this
-- one and before this one: the store runs the migrations in two stages around that move.
DROP TABLE IF EXISTS metric_points;
DROP TABLE IF EXISTS log_lines;
