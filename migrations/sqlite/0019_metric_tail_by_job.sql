-- Issue 41: a report's newest points are stored together, by job, until a series has enough
-- of them to be worth a chunk of its own (store/metrics.rs, "the tail").
--
-- A chunk is keyed by its series and last step, so each series' newest chunk is at the end
-- of its own key range, and each of a report's thirteen series dirtied a B-tree leaf of its
-- own: 13 of the some 20 pages a pod's round of reports wrote, each a WAL frame, a
-- checkpoint's copy and, at 1,000 pods (13,000 leaves, far beyond the page cache), often a
-- read before the write. Measured on the writer's thread at 1,000 pods: 117 MB/s read,
-- 81 MB/s written, checkpoints and WAL writes 40% of its time, and the writer saturated.
--
-- Here a report's series sit side by side under one key range per job, so a report dirties
-- one leaf; every 16th report of a series folds the series' tail into one chunk, so the
-- series' own leaf is dirtied once in 16 reports instead of at every one. A series' tail
-- always holds steps after all of its chunks (a report that reaches back into stored steps
-- folds the tail before it merges), so a read is the chunks, then the tail.
CREATE TABLE metric_tail (
    job_seq    INTEGER NOT NULL REFERENCES jobs(seq),
    last_step  INTEGER NOT NULL,
    series_id  INTEGER NOT NULL REFERENCES metric_series(id),
    first_step INTEGER NOT NULL,
    points     INTEGER NOT NULL,
    attempt    INTEGER NOT NULL,
    data       BLOB NOT NULL,
    PRIMARY KEY (job_seq, last_step, series_id)
) WITHOUT ROWID;
-- Reports stored in the series' tail since it was last folded, this one included; 0 when
-- the series' tail was folded into a chunk by its latest report. A count only: a tail
-- folded early (before a merge) is folded again at the count, whatever it then holds.
ALTER TABLE metric_series ADD COLUMN tail INTEGER NOT NULL DEFAULT 0;
