-- Hourly rollups of the hook's collectives and steps for trends (issue 19), the same tables on plain
-- PostgreSQL and TimescaleDB: a continuous aggregate cannot hold them (exact percentiles are
-- ordered-set aggregates and exposed communication needs a window over each step's collectives;
-- continuous aggregates take neither). Filled by the `rollup` job of `fabricscope serve`
-- (service/trends/rollup.py); they outlive the raw rows' retention.

-- Per (job, hour, op, size bucket, group size). op: the nccl-tests op of the hook's name
-- (core/busbw.HOOK_OPS), else the hook's own (barrier); bucket: largest power of two <= the
-- nccl-tests size; group_size: the group's, else the job's world size, else 0 (unknown). The busbw
-- columns cover the records GET /v1/jobs/{job}/efficiency counts (service/acceptance/efficiency.py
-- answers closed hours from them): bytes > 0 and < 1 TiB, duration > 0, 2 to 4Mi ranks.
CREATE TABLE collective_rollup (
    job             text NOT NULL,
    hour            timestamptz NOT NULL,
    op              text NOT NULL,
    bucket          bigint NOT NULL,
    group_size      int NOT NULL,
    count           bigint NOT NULL,
    sum_s           double precision NOT NULL,
    sum_bytes       bigint NOT NULL,             -- the hook's bytes: each rank's input
    p50_s           double precision NOT NULL,
    p99_s           double precision NOT NULL,
    p999_s          double precision NOT NULL,
    busbw_p50_gbps  double precision,            -- nccl-tests busbw; NULL where it has no definition
    busbw_p10_gbps  double precision,
    busbw_count     bigint NOT NULL DEFAULT 0,   -- the records behind busbw_p50/p10 (those with a busbw)
    busbw_bytes     double precision NOT NULL DEFAULT 0,  -- the sum of their nccl-tests sizes
    PRIMARY KEY (job, hour, op, bucket, group_size)
);
CREATE INDEX collective_rollup_hour ON collective_rollup (hour);

-- Per (job, hour) of the steps that started in it (each rank's step record counts).
CREATE TABLE step_rollup (
    job             text NOT NULL,
    hour            timestamptz NOT NULL,
    steps           bigint NOT NULL,             -- distinct step numbers
    rank_steps      bigint NOT NULL,             -- step records (one per rank and step)
    step_s          double precision NOT NULL,   -- sum of the records' durations
    comm_s          double precision NOT NULL,   -- sum of their collectives' durations (barrier excluded)
    exposed_comm_s  double precision NOT NULL,   -- sum of the union of those intervals within each step
    PRIMARY KEY (job, hour)
);
CREATE INDEX step_rollup_hour ON step_rollup (hour);

-- Hours that got raw rows since they were last rolled: one row per ingest batch and hour, appended
-- by the writer in the batch's transaction (no unique key, so concurrent batches never wait on
-- each other), deleted by the rollup job when it rolls that hour.
CREATE TABLE rollup_pending (
    job        text NOT NULL,
    hour       timestamptz NOT NULL,
    marked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rollup_pending_job_hour ON rollup_pending (job, hour);

-- The watermark per (job, hour): when it was last rolled, from how many raw rows.
CREATE TABLE rollup_hours (
    job          text NOT NULL,
    hour         timestamptz NOT NULL,
    rolled_at    timestamptz NOT NULL DEFAULT now(),
    collectives  bigint NOT NULL,
    steps        bigint NOT NULL,
    PRIMARY KEY (job, hour)
);

-- Data stored before this migration is rolled by the first runs of the job.
INSERT INTO rollup_pending (job, hour)
SELECT job, date_bin(INTERVAL '1 hour', start_ts, TIMESTAMPTZ '2000-01-01 00:00:00+00') FROM collectives
UNION
SELECT job, date_bin(INTERVAL '1 hour', start_ts, TIMESTAMPTZ '2000-01-01 00:00:00+00') FROM steps;
