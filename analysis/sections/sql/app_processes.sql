-- Paper §12, Figure 3C: one row per complete encoder process of the latest cifar run —
-- (seed, method), its allocated and reserved peaks (the maximum over every observation:
-- before each reset and at exit), complete-encoder seconds, the test-score hash and the
-- test accuracy and mean cross-entropy read back from the score file; ``observed`` is false
-- for a quality-only seed (no peaks; left out of Figure 3C and Table 9).
WITH latest AS (SELECT coalesce((SELECT arg_max(run_id, started_at) FROM runs WHERE cohort = 'cifar'),
                                (SELECT max(run_id) FROM records WHERE cohort = 'cifar')) AS run_id),
     peaks_ AS (SELECT seed, method, max(peak_allocated_bytes) AS allocated, max(peak_reserved_bytes) AS reserved,
                       any_value(peak_source) AS peak_source, count(*) AS observations
                FROM peaks WHERE cohort = 'cifar' AND run_id = (SELECT run_id FROM latest) GROUP BY ALL)
SELECT r.seed, r.method, p.allocated AS peak_allocated_bytes, p.reserved AS peak_reserved_bytes, p.peak_source,
       p.observations, r.encoder_seconds, r.sha256 AS scores_sha256, r.encoder_sha256, r.test_accuracy,
       r.test_mean_loss, r.checksum_verified, r.hardware, coalesce(r.observed, true) AS observed,
       r.card_source
FROM records r LEFT JOIN peaks_ p USING (seed, method)
WHERE r.cohort = 'cifar' AND r.run_id = (SELECT run_id FROM latest) AND r.check_name = 'test_scores'
ORDER BY r.seed, r.method
