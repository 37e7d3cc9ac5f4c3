-- Paper Table 1, per engine: recoveries, gradient error and retained bytes by write density.
-- Rows: records with check = 'engines'; retained_bytes = bytes the engine kept for one program
-- (measured nbytes of its arrays); writes = the generator's sparse | dense setting.
SELECT
    method,
    writes,
    count(*)                                      AS programs,
    count(*) FILTER (WHERE outcome = 'match')     AS matches,
    max(max_error)                                AS max_gradient_error,
    avg(retained_bytes)                           AS mean_retained_bytes,
    avg(write_fraction)                           AS mean_write_fraction
FROM records
WHERE backend = 'finite' AND "check" = 'engines'
GROUP BY method, writes
ORDER BY writes, method;
