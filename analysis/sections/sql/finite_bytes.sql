-- Paper §6 and eq. 2, byte suite: exact bytes and generator state.
-- Rows: records with check_name = 'bytes' (one per program x method; seed = the program).
-- 'snapshot' and 'region_undo' are valid paths: outcome 'match' = bytes and generator state
-- reproduced exactly. 'wrong_rng_control' is the control: 'diverge' = detected, so
-- "detected N/N" = control rows that diverged / all control rows.
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest))),
     b AS (SELECT * FROM f WHERE check_name = 'bytes')
SELECT
    count(DISTINCT seed)                                                            AS programs,
    count(*) FILTER (WHERE method = 'snapshot' AND outcome = 'match')                AS snapshot_matches,
    count(*) FILTER (WHERE method = 'snapshot')                                      AS snapshot_rows,
    count(*) FILTER (WHERE method = 'region_undo' AND outcome = 'match')             AS region_undo_matches,
    count(*) FILTER (WHERE method = 'region_undo')                                   AS region_undo_rows,
    count(*) FILTER (WHERE method = 'wrong_rng_control' AND outcome = 'diverge')     AS wrong_rng_detected,
    count(*) FILTER (WHERE method = 'wrong_rng_control')                             AS wrong_rng_rows
FROM b;
