-- Paper Table 9: per method over the seeds of the latest cifar run — allocated and reserved
-- peak MiB (least and largest over seeds: the paper's are identical across seeds), mean
-- complete-encoder seconds and their min–max over seeds (a range, not an interval); observed
-- seeds only (a quality-only seed, the paper's 2701, has no allocator reads).
WITH latest AS (SELECT coalesce((SELECT arg_max(run_id, started_at) FROM runs WHERE cohort = 'cifar'),
                                (SELECT max(run_id) FROM records WHERE cohort = 'cifar')) AS run_id),
     per AS (SELECT r.seed, r.method, r.encoder_seconds,
                    (SELECT max(peak_allocated_bytes) FROM peaks p WHERE p.cohort = 'cifar' AND p.run_id = r.run_id
                       AND p.seed = r.seed AND p.method = r.method) AS allocated,
                    (SELECT max(peak_reserved_bytes) FROM peaks p WHERE p.cohort = 'cifar' AND p.run_id = r.run_id
                       AND p.seed = r.seed AND p.method = r.method) AS reserved
             FROM records r WHERE r.cohort = 'cifar' AND r.run_id = (SELECT run_id FROM latest)
               AND r.check_name = 'test_scores' AND coalesce(r.observed, true))
SELECT method, count(*) AS seeds,
       min(allocated) / 1048576.0 AS min_allocated_mib, max(allocated) / 1048576.0 AS max_allocated_mib,
       min(reserved) / 1048576.0 AS min_reserved_mib, max(reserved) / 1048576.0 AS max_reserved_mib,
       avg(encoder_seconds) AS mean_encoder_seconds, min(encoder_seconds) AS min_encoder_seconds,
       max(encoder_seconds) AS max_encoder_seconds
FROM per GROUP BY method
ORDER BY list_position($methods, method)  -- stateaware.app.protocol.METHODS
