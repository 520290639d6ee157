-- The read-only role Grafana connects as. Run by the one-shot `grafana-grants` service of
-- docker-compose.yml after every migration (re-appliable), with psql variables reader and pass:
--   psql -v reader=grafana -v pass=... -f grafana-reader.sql
-- Grafana reads telemetry, timings, inventory and answers; never webhook secrets or delivery bodies.
\set ON_ERROR_STOP on
SELECT format('CREATE ROLE %I LOGIN', :'reader')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'reader') \gexec
SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L', :'reader', :'pass') \gexec
SELECT format('ALTER ROLE %I SET default_transaction_read_only = on', :'reader') \gexec
SELECT format('ALTER ROLE %I SET statement_timeout = %L', :'reader', '30s') \gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), :'reader') \gexec
SELECT format('GRANT USAGE ON SCHEMA public TO %I', :'reader') \gexec
SELECT format('GRANT SELECT ON ALL TABLES IN SCHEMA public TO %I', :'reader') \gexec
SELECT format('REVOKE ALL ON TABLE %I FROM %I', t, :'reader')
FROM unnest(ARRAY['webhooks', 'deliveries', 'delivery_attempts', 'ingest_batches', 'leases', 'alembic_version']) t
WHERE to_regclass(t) IS NOT NULL \gexec
