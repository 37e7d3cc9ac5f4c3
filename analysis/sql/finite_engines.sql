-- Paper §7 and Table 3, engine study: five preservation engines and complex step.
-- Rows: records with check = 'engines' (one per program x engine) and check = 'complex_step'
-- (one per checked program; coordinates = input coordinates compared).
-- outcome 'match' = the engine recovered exactly the forward reads, restored the live
-- storage, and its reconstructed gradient is within tolerance of the forward Jacobian.
WITH e AS (SELECT * FROM records WHERE backend = 'finite' AND "check" = 'engines'),
     c AS (SELECT * FROM records WHERE backend = 'finite' AND "check" = 'complex_step')
SELECT
    (SELECT count(DISTINCT seed) FROM e)                                AS programs,
    (SELECT count(*) FILTER (WHERE outcome = 'match') FROM e)           AS engine_matches,
    (SELECT count(*) FROM e)                                            AS engine_rows,
    (SELECT max(max_error) FROM e)                                      AS max_engine_gradient_error,
    (SELECT count(DISTINCT seed) FROM c)                                AS complex_step_programs,
    (SELECT sum(coordinates) FROM c)                                    AS complex_step_coordinates,
    (SELECT max(max_error) FROM c)                                      AS max_complex_step_error,
    (SELECT count(*) FILTER (WHERE outcome = 'match') FROM c)           AS complex_step_matches;
