-- Paper Tables 8 and 10: regions relative to whole snapshots and to eager, per cell of the
-- latest run of each timing cohort. Ratios are geometric means over processes of each
-- process's ratio of mean measured step time, and of measured peak allocated bytes. Time
-- ratios on both clocks: time_per_* on the wall clock (timings.step_ms), cpu_time_per_* on
-- the timed thread's CPU clock (timings.cpu_ms; NULL where the records hold no CPU times).
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     keep AS (SELECT run_id FROM latest UNION ALL SELECT DISTINCT run_id FROM timings
              WHERE (SELECT count(*) FROM runs) = 0),
     pm AS (
         SELECT cohort, cell, process_index, method,
                any_value(workload) AS workload, any_value(buffer_bytes) AS buffer_bytes,
                any_value(write_fraction) AS write_fraction, any_value(live_segments) AS live_segments,
                avg(step_ms) FILTER (WHERE NOT warmup) AS ms,
                avg(cpu_ms) FILTER (WHERE NOT warmup) AS cpu, max(peak_allocated_bytes) AS peak
         FROM timings WHERE run_id IN (SELECT run_id FROM keep) GROUP BY ALL),
     r AS (SELECT * FROM pm WHERE method = 'regions'),
     w AS (SELECT * FROM pm WHERE method = 'whole'),
     e AS (SELECT * FROM pm WHERE method = 'eager')
SELECT * FROM (
SELECT r.cohort, r.cell, r.workload, r.buffer_bytes, r.write_fraction, r.live_segments,
       count(*) AS processes,
       exp(avg(ln(r.peak / w.peak))) AS peak_per_whole,
       exp(avg(ln(r.ms / w.ms))) AS time_per_whole,
       exp(avg(ln(r.peak / e.peak))) AS peak_per_eager,
       exp(avg(ln(r.ms / e.ms))) AS time_per_eager,
       exp(avg(ln(r.cpu / w.cpu))) AS cpu_time_per_whole,
       exp(avg(ln(r.cpu / e.cpu))) AS cpu_time_per_eager
FROM r JOIN w USING (cohort, cell, process_index) JOIN e USING (cohort, cell, process_index)
GROUP BY ALL
) AS summary
ORDER BY cohort, list_position(['feature_queue', 'prototype_memory', 'unrolled_recurrence'], workload),
         buffer_bytes, write_fraction, live_segments;
