-- Applied by `fabricscope migrate` when the timescaledb extension is available. Re-appliable.
-- :retention_days and :compress_after_days are substituted by the migrate command.
CREATE EXTENSION IF NOT EXISTS timescaledb;
SELECT create_hypertable('samples', by_range('ts', INTERVAL '1 day'), if_not_exists => TRUE, migrate_data => TRUE);
SELECT create_hypertable('steps', by_range('start_ts', INTERVAL '7 days'), if_not_exists => TRUE, migrate_data => TRUE);
SELECT create_hypertable('collectives', by_range('start_ts', INTERVAL '1 day'), if_not_exists => TRUE, migrate_data => TRUE);
SELECT create_hypertable('collective_summaries', by_range('start_ts', INTERVAL '1 day'), if_not_exists => TRUE,
                         migrate_data => TRUE);
-- Compression (columnstore): samples by series, collectives by job (the engine reads a job's steps;
-- both tables are append-only, and their rows are ~90 % of the database). Set once: a hypertable with
-- compressed chunks refuses a new configuration, and the same one needs no second ALTER.
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM timescaledb_information.hypertables
                  WHERE hypertable_schema = current_schema() AND hypertable_name = 'samples' AND compression_enabled) THEN
    ALTER TABLE samples SET (timescaledb.compress, timescaledb.compress_segmentby = 'series_id',
                             timescaledb.compress_orderby = 'ts DESC');
  END IF;
  IF NOT EXISTS (SELECT 1 FROM timescaledb_information.hypertables
                  WHERE hypertable_schema = current_schema() AND hypertable_name = 'collectives' AND compression_enabled) THEN
    ALTER TABLE collectives SET (timescaledb.compress, timescaledb.compress_segmentby = 'job',
                                 timescaledb.compress_orderby = 'step, rank, start_ts');
  END IF;
END
$$;
SELECT add_compression_policy('samples', INTERVAL ':compress_after_days days', if_not_exists => TRUE);
SELECT add_compression_policy('collectives', INTERVAL ':compress_after_days days', if_not_exists => TRUE);
-- Retention policies are (re)made only when absent or when FABRICSCOPE_RETENTION_DAYS changed (#47):
-- migrate runs on every `serve`, and a policy removed and added again ran its job at once, dropping the
-- chunks older than the retention the moment the service started (the engine then found its steps'
-- counters gone: two correlate tests' causes came back `unknown`). A new policy's first run waits one
-- schedule interval (a day) for the same reason: it must not race the first rows written after migrate.
DO $$
DECLARE
  t text;
  want interval := INTERVAL ':retention_days days';
  have interval;
BEGIN
  FOREACH t IN ARRAY ARRAY['samples', 'collectives', 'collective_summaries'] LOOP
    SELECT (config->>'drop_after')::interval INTO have FROM timescaledb_information.jobs
     WHERE proc_name = 'policy_retention' AND hypertable_schema = current_schema() AND hypertable_name = t;
    IF have IS DISTINCT FROM want THEN
      PERFORM remove_retention_policy(t::regclass, if_exists => TRUE);
      PERFORM add_retention_policy(t::regclass, want, schedule_interval => INTERVAL '1 day',
                                   initial_start => now() + INTERVAL '1 day');
    END IF;
  END LOOP;
END
$$;
-- A database migrated plain before (no timescaledb then) has samples_1m as plain.sql's date_bin view:
-- replaced by the continuous aggregate, or IF NOT EXISTS below would keep the view and the policy fail.
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_views WHERE schemaname = current_schema() AND viewname = 'samples_1m')
     AND NOT EXISTS (SELECT 1 FROM timescaledb_information.continuous_aggregates
                      WHERE view_schema = current_schema() AND view_name = 'samples_1m') THEN
    DROP VIEW samples_1m;
  END IF;
END
$$;
CREATE MATERIALIZED VIEW IF NOT EXISTS samples_1m
WITH (timescaledb.continuous) AS
SELECT time_bucket(INTERVAL '1 minute', ts) AS bucket, series_id,
       avg(rate) AS rate, max(rate) AS max_rate, last(value, ts) AS value
FROM samples GROUP BY 1, 2 WITH NO DATA;
SELECT add_continuous_aggregate_policy('samples_1m', start_offset => INTERVAL '1 hour',
       end_offset => INTERVAL '1 minute', schedule_interval => INTERVAL '1 minute', if_not_exists => TRUE);
