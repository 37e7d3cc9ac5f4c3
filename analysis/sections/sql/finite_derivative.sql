-- Paper §6, derivative suite: version graph vs forward Jacobian, and the final-storage control.
-- Rows: records with check_name = 'derivative' (one per program x method; seed = the program).
-- Convention: outcome 'match' = the check holds. For method 'final_storage_control' a
-- 'diverge' is the expected result: "detected N/N" = control rows that diverged / all.
-- max_error = largest absolute gradient difference from the forward-Jacobian reference.
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest))),
     d AS (SELECT * FROM f WHERE check_name = 'derivative')
SELECT
    count(DISTINCT seed)                                                                AS programs,
    count(*) FILTER (WHERE method = 'version_graph' AND outcome = 'match')               AS graph_matches,
    count(*) FILTER (WHERE method = 'version_graph')                                     AS graph_rows,
    max(max_error) FILTER (WHERE method = 'version_graph')                               AS max_gradient_disagreement,
    count(*) FILTER (WHERE method = 'final_storage_control' AND outcome = 'diverge')     AS control_detected,
    count(*) FILTER (WHERE method = 'final_storage_control')                             AS control_rows,
    max(max_error) FILTER (WHERE method = 'final_storage_control' AND outcome = 'match') AS control_undetected_max_error
FROM d;
