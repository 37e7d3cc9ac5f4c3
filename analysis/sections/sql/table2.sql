-- Paper §5, Table 2: matches (M), framework rejections (R) and divergences (D) per backend
-- and execution method of the semantic cohort. Every outcome stays in its row's
-- denominator (n); `other` counts any outcome that is none of the three (none expected).
-- Rows: records with check_name = 'table2' (one per seed key x family x precision x method).
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts conditions; with no runs rows (records written outside the launcher)
-- every table2 row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     t AS (SELECT * FROM records WHERE check_name = 'table2'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest)))
SELECT
    backend,
    method,
    count(*) FILTER (WHERE outcome = 'match')                              AS m,
    count(*) FILTER (WHERE outcome = 'reject')                             AS r,
    count(*) FILTER (WHERE outcome = 'diverge')                            AS d,
    count(*) FILTER (WHERE outcome NOT IN ('match', 'reject', 'diverge'))  AS other,
    count(*)                                                               AS n,
    count(DISTINCT seed)                                                   AS seed_keys,
    max(max_error) FILTER (WHERE outcome = 'match')                        AS max_match_error
FROM t
GROUP BY backend, method
ORDER BY backend DESC, method;
