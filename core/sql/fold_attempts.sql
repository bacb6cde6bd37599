-- Folds finished attempts $1 < id <= $2 into minute_stats ($3: latency bounds
-- in ms, $4: bucket count); run under the progress row's lock (jobs/rollup.rs).
INSERT INTO minute_stats AS m (source, minute, attempts, attempts_failed,
    events_completed, events_dead, e2e_hist, ack_hist)
SELECT source, minute, sum(n), sum(failed), sum(completed), sum(dead),
       histogram_of(array_agg(bucket) FILTER (WHERE completed > 0),
                    array_agg(completed) FILTER (WHERE completed > 0), $4),
       array_fill(0, ARRAY[$4])
FROM (SELECT e.source, date_trunc('minute', a.finished_at) AS minute,
             width_bucket(extract(epoch FROM a.finished_at - e.first_seen_at) * 1000,
                          $3::float8[]) + 1 AS bucket,
             count(*) AS n,
             count(*) FILTER (WHERE a.status IS NULL OR a.status NOT BETWEEN 200 AND 299) AS failed,
             count(*) FILTER (WHERE a.result = 'completed'
                              OR (a.result IS NULL AND a.status BETWEEN 200 AND 299)) AS completed,
             count(*) FILTER (WHERE a.result = 'dead') AS dead
      FROM attempts a JOIN events e ON e.id = a.event_id
      WHERE a.id > $1 AND a.id <= $2
      GROUP BY 1, 2, 3) g
GROUP BY source, minute
ON CONFLICT (source, minute) DO UPDATE SET
    attempts = m.attempts + EXCLUDED.attempts,
    attempts_failed = m.attempts_failed + EXCLUDED.attempts_failed,
    events_completed = m.events_completed + EXCLUDED.events_completed,
    events_dead = m.events_dead + EXCLUDED.events_dead,
    e2e_hist = histogram_add(m.e2e_hist, EXCLUDED.e2e_hist)
