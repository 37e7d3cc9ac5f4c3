-- Paper Tables 4, 6 and 7: per cohort, cell and method of the latest run of each timing
-- cohort — the plan (feasible, predicted peak and time, budget) beside what was measured:
-- mean step time on each clock (arithmetic mean over processes of each process's mean
-- measured step: mean_step_ms on the wall clock, timings.step_ms; mean_cpu_ms on the timed
-- thread's CPU clock, timings.cpu_ms, NULL for records kept before CPU times were),
-- measured peak allocated bytes (least and largest over processes), and how many processes'
-- measured peaks fit the budget. Infeasible plans have no timings: their measured columns
-- are NULL and their processes 0 — they were never executed.
WITH latest AS (SELECT cohort, arg_max(run_id, started_at) AS run_id FROM runs GROUP BY cohort),
     keep AS (SELECT run_id FROM latest UNION ALL SELECT DISTINCT run_id FROM policies
              WHERE (SELECT count(*) FROM runs) = 0),
     per_process AS (
         SELECT cohort, run_id, cell, method, process_index,
                avg(step_ms) FILTER (WHERE NOT warmup) AS ms,
                avg(cpu_ms) FILTER (WHERE NOT warmup) AS cpu,
                max(peak_allocated_bytes) AS peak,
                any_value(peak_source) AS peak_source
         FROM timings WHERE run_id IN (SELECT run_id FROM keep) GROUP BY ALL),
     plans AS (
         SELECT cohort, run_id, cell, method, any_value(workload) AS workload,
                bool_and(feasible) AS feasible, any_value(planner) AS planner,
                any_value(array_to_string(policy, ',')) AS policy,
                any_value(predicted_peak_bytes) AS predicted_peak_bytes,
                any_value(predicted_ms) AS predicted_ms, any_value(budget_bytes) AS budget_bytes,
                count(DISTINCT process_index) AS planned_processes
         FROM policies WHERE run_id IN (SELECT run_id FROM keep) GROUP BY ALL)
SELECT * FROM (
SELECT p.cohort, p.cell, p.workload, p.method, p.planner, p.feasible, p.policy,
       p.planned_processes, count(m.process_index) AS processes,
       avg(m.ms) AS mean_step_ms, avg(m.cpu) AS mean_cpu_ms,
       min(m.peak) AS min_peak_bytes, max(m.peak) AS max_peak_bytes,
       p.predicted_peak_bytes, p.predicted_ms, p.budget_bytes,
       count(*) FILTER (WHERE m.peak <= p.budget_bytes) AS fits,
       any_value(m.peak_source) AS peak_source
FROM plans p LEFT JOIN per_process m USING (cohort, run_id, cell, method)
GROUP BY ALL
) AS summary
ORDER BY cohort, cell,
         list_position($methods, method);  -- stateaware.cost_runtime.METHODS
