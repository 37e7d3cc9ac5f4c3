-- Paper §7 and Table 3, joint-alias stress test.
-- Rows: records with check_name = 'joint_alias': one per program x engine (outcome 'match' =
-- restored bytes, generator state, alias views and a repeated backward all agree and the
-- gradient is within tolerance), and one method = 'admission' row per integer-write variant
-- (outcome 'unsupported' = refused before execution; no gradient exists for it).
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest))),
     j AS (SELECT * FROM f WHERE check_name = 'joint_alias')
SELECT
    count(DISTINCT seed) FILTER (WHERE method <> 'admission')                       AS programs,
    count(*) FILTER (WHERE method <> 'admission' AND outcome = 'match')              AS recoveries_matched,
    count(*) FILTER (WHERE method <> 'admission')                                    AS recoveries,
    max(max_error) FILTER (WHERE method <> 'admission')                              AS max_joint_gradient_error,
    count(*) FILTER (WHERE method = 'admission' AND outcome = 'unsupported')         AS unsupported,
    count(*) FILTER (WHERE method = 'admission')                                     AS admission_rows,
    (SELECT sum(operations) FROM (SELECT DISTINCT seed, operations FROM j WHERE method <> 'admission')) AS stored_operations
FROM j;
