-- Nothing reads attempts by start time (pages go through attempts_by_event,
-- the rollups and retention through ids), and each attempt paid for the
-- index twice: at its insert and at the non-HOT update recording its end.
DROP INDEX attempts_by_time;
