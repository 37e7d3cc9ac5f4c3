-- Paper Table 1, per engine: recoveries, gradient error and retained bytes by write density.
-- Rows: records with check_name = 'engines'; retained_bytes = bytes the engine kept for one program
-- (measured nbytes of its arrays); writes = the generator's sparse | dense setting.
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest)))
SELECT
    method,
    writes,
    count(*)                                      AS programs,
    count(*) FILTER (WHERE outcome = 'match')     AS matches,
    max(max_error)                                AS max_gradient_error,
    avg(retained_bytes)                           AS mean_retained_bytes,
    avg(write_fraction)                           AS mean_write_fraction
FROM f
WHERE check_name = 'engines'
GROUP BY method, writes
ORDER BY writes, method;
