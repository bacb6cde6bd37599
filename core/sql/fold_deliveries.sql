-- Folds deliveries $1 < id <= $2 into minute_stats ($3: latency bounds in ms,
-- $4: bucket count); run under the progress row's lock (jobs/rollup.rs).
INSERT INTO minute_stats AS m (source, minute, deliveries, claimed, completed,
    in_progress, dead, rejected, bad_signature, redeliveries, ack_hist,
    first_delivery_id, last_delivery_id, e2e_hist)
SELECT source, minute, sum(n), sum(claimed), sum(completed), sum(in_progress),
       sum(dead), sum(rejected), sum(bad_signature), sum(redeliveries),
       histogram_of(array_agg(bucket), array_agg(n), $4),
       min(lo), max(hi), array_fill(0, ARRAY[$4])
FROM (SELECT source, date_trunc('minute', received_at) AS minute,
             width_bucket(coalesce(ack_micros, 0) / 1000.0, $3::float8[]) + 1 AS bucket,
             count(*) AS n,
             count(*) FILTER (WHERE outcome = 'claimed') AS claimed,
             count(*) FILTER (WHERE outcome = 'completed') AS completed,
             count(*) FILTER (WHERE outcome = 'in_progress') AS in_progress,
             count(*) FILTER (WHERE outcome = 'dead') AS dead,
             count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
             count(*) FILTER (WHERE outcome = 'rejected' AND http_status = 401) AS bad_signature,
             count(*) FILTER (WHERE redelivery_of IS NOT NULL) AS redeliveries,
             min(id) AS lo, max(id) AS hi
      FROM deliveries WHERE id > $1 AND id <= $2
      GROUP BY 1, 2, 3) g
GROUP BY source, minute
ON CONFLICT (source, minute) DO UPDATE SET
    deliveries = m.deliveries + EXCLUDED.deliveries,
    claimed = m.claimed + EXCLUDED.claimed,
    completed = m.completed + EXCLUDED.completed,
    in_progress = m.in_progress + EXCLUDED.in_progress,
    dead = m.dead + EXCLUDED.dead,
    rejected = m.rejected + EXCLUDED.rejected,
    bad_signature = m.bad_signature + EXCLUDED.bad_signature,
    redeliveries = m.redeliveries + EXCLUDED.redeliveries,
    ack_hist = histogram_add(m.ack_hist, EXCLUDED.ack_hist),
    first_delivery_id = least(m.first_delivery_id, EXCLUDED.first_delivery_id),
    last_delivery_id = greatest(m.last_delivery_id, EXCLUDED.last_delivery_id)
