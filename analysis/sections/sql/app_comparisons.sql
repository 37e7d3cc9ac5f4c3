-- Paper §12 comparisons: joint vs whole and joint vs deferred eager, per seed paired within
-- the latest cifar run, on allocated peak and complete-encoder seconds: the geometric mean
-- of the per-seed ratios and their min–max (descriptive; no interval is claimed); observed
-- seeds only.
WITH latest AS (SELECT coalesce((SELECT arg_max(run_id, started_at) FROM runs WHERE cohort = 'cifar'),
                                (SELECT max(run_id) FROM records WHERE cohort = 'cifar')) AS run_id),
     per AS (SELECT r.seed, r.method, r.encoder_seconds AS seconds,
                    (SELECT max(peak_allocated_bytes) FROM peaks p WHERE p.cohort = 'cifar' AND p.run_id = r.run_id
                       AND p.seed = r.seed AND p.method = r.method) AS allocated
             FROM records r WHERE r.cohort = 'cifar' AND r.run_id = (SELECT run_id FROM latest)
               AND r.check_name = 'test_scores' AND coalesce(r.observed, true)),
     pairs AS (SELECT d.method AS denominator, n.seed,
                      n.allocated / d.allocated AS allocated_ratio, n.seconds / d.seconds AS seconds_ratio
               FROM per n JOIN per d ON n.seed = d.seed
               WHERE n.method = 'joint' AND d.method IN ('whole', 'deferred'))
SELECT 'joint/' || denominator AS comparison, count(*) AS seeds,
       exp(avg(ln(allocated_ratio))) AS allocated_geomean, min(allocated_ratio) AS allocated_min,
       max(allocated_ratio) AS allocated_max,
       exp(avg(ln(seconds_ratio))) AS seconds_geomean, min(seconds_ratio) AS seconds_min,
       max(seconds_ratio) AS seconds_max
FROM pairs GROUP BY denominator ORDER BY denominator DESC
