-- Applied by `fabricscope migrate` on plain PostgreSQL (no timescaledb). Re-appliable.
-- 1-minute rates with date_bin (the plain-PostgreSQL twin of the continuous aggregate samples_1m).
CREATE OR REPLACE VIEW samples_1m AS
SELECT date_bin(INTERVAL '1 minute', ts, TIMESTAMPTZ '2000-01-01') AS bucket, series_id,
       avg(rate) AS rate, max(rate) AS max_rate,
       (array_agg(value ORDER BY ts DESC))[1] AS value
FROM samples GROUP BY 1, 2;
