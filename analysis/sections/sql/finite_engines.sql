-- Paper §7 and Table 3, engine study: five preservation engines and complex step.
-- Rows: records with check_name = 'engines' (one per program x engine) and check_name = 'complex_step'
-- (one per checked program; coordinates = input coordinates compared).
-- outcome 'match' = the engine recovered exactly the forward reads, restored the live
-- storage, and its reconstructed gradient is within tolerance of the forward Jacobian.
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest))),
     e AS (SELECT * FROM f WHERE check_name = 'engines'),
     c AS (SELECT * FROM f WHERE check_name = 'complex_step')
SELECT
    (SELECT count(DISTINCT seed) FROM e)                                AS programs,
    (SELECT count(*) FILTER (WHERE outcome = 'match') FROM e)           AS engine_matches,
    (SELECT count(*) FROM e)                                            AS engine_rows,
    (SELECT max(max_error) FROM e)                                      AS max_engine_gradient_error,
    (SELECT count(DISTINCT seed) FROM c)                                AS complex_step_programs,
    (SELECT sum(coordinates) FROM c)                                    AS complex_step_coordinates,
    (SELECT max(max_error) FROM c)                                      AS max_complex_step_error,
    (SELECT count(*) FILTER (WHERE outcome = 'match') FROM c)           AS complex_step_matches;
