-- Applied by `fabricscope migrate` when the timescaledb extension is available. Re-appliable.
-- :retention_days and :compress_after_days are substituted by the migrate command.
CREATE EXTENSION IF NOT EXISTS timescaledb;
SELECT create_hypertable('samples', by_range('ts', INTERVAL '1 day'), if_not_exists => TRUE, migrate_data => TRUE);
SELECT create_hypertable('steps', by_range('start_ts', INTERVAL '7 days'), if_not_exists => TRUE, migrate_data => TRUE);
SELECT create_hypertable('collectives', by_range('start_ts', INTERVAL '1 day'), if_not_exists => TRUE, migrate_data => TRUE);
ALTER TABLE samples SET (timescaledb.compress, timescaledb.compress_segmentby = 'series_id',
                         timescaledb.compress_orderby = 'ts DESC');
SELECT add_compression_policy('samples', INTERVAL ':compress_after_days days', if_not_exists => TRUE);
SELECT remove_retention_policy('samples', if_exists => TRUE);
SELECT add_retention_policy('samples', INTERVAL ':retention_days days', if_not_exists => TRUE);
SELECT remove_retention_policy('collectives', if_exists => TRUE);
SELECT add_retention_policy('collectives', INTERVAL ':retention_days days', if_not_exists => TRUE);
CREATE MATERIALIZED VIEW IF NOT EXISTS samples_1m
WITH (timescaledb.continuous) AS
SELECT time_bucket(INTERVAL '1 minute', ts) AS bucket, series_id,
       avg(rate) AS rate, max(rate) AS max_rate, last(value, ts) AS value
FROM samples GROUP BY 1, 2 WITH NO DATA;
SELECT add_continuous_aggregate_policy('samples_1m', start_offset => INTERVAL '1 hour',
       end_offset => INTERVAL '1 minute', schedule_interval => INTERVAL '1 minute', if_not_exists => TRUE);
