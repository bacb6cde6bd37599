-- bench/cost: what each stage cost the database per new event, from the
-- counters bench/cost reset before the load (psql variables: :events new
-- events, :deliveries deliveries, :pg_cpu_ms PostgreSQL's CPU over the
-- window, all processes). A stage is a statement family, told by its text.
\pset footer off
\echo 'per statement family (per new event unless said)'
WITH s AS (
    SELECT CASE
             WHEN query LIKE 'WITH keys AS%' THEN '1 claim batch'
             WHEN query LIKE 'INSERT INTO signed_content%' THEN '0 replay guard'
             WHEN query LIKE 'WITH input AS%' THEN '3 record (and complete)'
             WHEN query LIKE 'WITH runnable AS%' THEN '2 lease'
             WHEN query LIKE '%INSERT INTO minute_stats%' OR query LIKE '%rollup_progress%'
                  OR query LIKE 'SELECT (SELECT coalesce(max(id), 0) FROM deliveries)%'
                  OR query LIKE 'SELECT min(id) FROM attempts WHERE finished_at IS NULL%' THEN '4 rollups'
             WHEN query ~* '^\s*(BEGIN|COMMIT|ROLLBACK|SET |SELECT \$1|select 1)' THEN '5 transaction control'
             ELSE '6 other: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 40)
           END AS stage,
           calls, plans, rows, total_exec_time, total_plan_time, wal_records, wal_fpi, wal_bytes
    FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT stage,
       sum(calls) AS calls,
       round(sum(rows)::numeric / nullif(sum(calls), 0), 1) AS "rows/call",
       round(sum(calls)::numeric / :events, 3) AS "calls/event",
       round(sum(rows)::numeric / :events, 2) AS "rows/event",
       round((sum(total_exec_time) + sum(total_plan_time))::numeric * 1000 / :events, 1) AS "us/event",
       round(sum(plans)::numeric / nullif(sum(calls), 0), 2) AS "plans/call",
       round(sum(wal_records)::numeric / :events, 2) AS "WAL records/event",
       round(sum(wal_bytes)::numeric / :events) AS "WAL bytes/event",
       round(sum(wal_fpi)::numeric / :events, 3) AS "FPI/event"
FROM s GROUP BY stage ORDER BY stage;

\echo 'rows written per new event, by table (partitions summed): inserted, updated, of them HOT'
SELECT regexp_replace(relname, '_(p[0-9]{8}|legacy)$', '') AS "table",
       round(sum(n_tup_ins)::numeric / :events, 2) AS "inserted",
       round(sum(n_tup_upd)::numeric / :events, 2) AS "updated",
       round(sum(n_tup_hot_upd)::numeric / :events, 2) AS "HOT",
       round(sum(n_tup_del)::numeric / :events, 2) AS "deleted"
FROM pg_stat_user_tables
GROUP BY 1 HAVING sum(n_tup_ins + n_tup_upd + n_tup_del) > 0 ORDER BY 1;

\echo 'the whole window'
SELECT :events AS "new events", :deliveries AS deliveries,
       round(wal_bytes::numeric / :events) AS "WAL bytes/event",
       round(wal_records::numeric / :events, 2) AS "WAL records/event",
       round(wal_fpi::numeric / :events, 3) AS "FPI/event",
       round((SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())::numeric / :events, 3)
           AS "commits/event",
       round(:pg_cpu_ms::numeric * 1000 / :events) AS "PostgreSQL CPU us/event"
FROM pg_stat_wal;
