-- The tables older versions kept a row per metric value and per log line in; the SQLite
-- migration 0021 says when their rows are moved.
DROP TABLE IF EXISTS metric_points;
DROP TABLE IF EXISTS log_lines;
