-- Retained-byte ratios of the engine study, by write density.
-- Per program: region_journal / whole, region_journal / eager and guarded_region / whole
-- retained bytes; reported as the geometric mean over programs and the min/max.
-- Rows: records with check_name = 'engines' (one per program x engine; seed = the program).
-- Only the latest run of each cohort counts (by runs.started_at), so a re-run never
-- double-counts programs; with no runs rows (records written outside the launcher) every
-- finite row counts.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     f AS (SELECT * FROM records WHERE backend = 'finite'
           AND ((SELECT count(*) FROM runs) = 0 OR run_id IN (SELECT run_id FROM latest))),
     e AS (SELECT seed, writes, method, retained_bytes::DOUBLE AS bytes
           FROM f WHERE check_name = 'engines'),
     p AS (
        SELECT seed, any_value(writes) AS writes,
               max(bytes) FILTER (WHERE method = 'region_journal') AS region,
               max(bytes) FILTER (WHERE method = 'guarded_region') AS guarded,
               max(bytes) FILTER (WHERE method = 'whole')          AS whole,
               max(bytes) FILTER (WHERE method = 'eager')          AS eager,
               max(bytes) FILTER (WHERE method = 'read_set')       AS read_set
        FROM e GROUP BY seed)
SELECT
    writes,
    count(*)                          AS programs,
    exp(avg(ln(region / whole)))      AS region_over_whole,
    min(region / whole)               AS region_over_whole_min,
    max(region / whole)               AS region_over_whole_max,
    exp(avg(ln(region / eager)))      AS region_over_eager,
    min(region / eager)               AS region_over_eager_min,
    max(region / eager)               AS region_over_eager_max,
    exp(avg(ln(guarded / whole)))     AS guarded_over_whole,
    exp(avg(ln(read_set / whole)))    AS read_set_over_whole
FROM p
GROUP BY writes
ORDER BY writes DESC;
