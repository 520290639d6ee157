-- Acceptance runs (nccl-tests / rccl-tests, issue 19) and the state of the busbw_below_acceptance
-- alert. Plain tables in both flavours: a few runs of a few hundred rows each, no time series.

CREATE TABLE acceptance_runs (
    id               bigserial PRIMARY KEY,
    fabric           text NOT NULL,
    labels           jsonb NOT NULL DEFAULT '{}'::jsonb,
    op               text NOT NULL,                 -- nccl-tests op: binary name minus _perf
    library          text CHECK (library IN ('nccl', 'rccl')),
    started_at       timestamptz,
    ranks            int NOT NULL CHECK (ranks >= 1),
    nodes            int CHECK (nodes >= 1),
    threads          int,
    gpus_per_thread  int,
    versions         jsonb NOT NULL DEFAULT '{}'::jsonb,
    command          text,
    devices          jsonb NOT NULL DEFAULT '[]'::jsonb,   -- per-rank device lines: how a bad node is found
    avg_busbw_gbps   double precision,
    wrong_total      bigint,                        -- NULL: the output had no check column (-c 0)
    source           text,
    problems         jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX acceptance_runs_fabric_op ON acceptance_runs (fabric, op, ranks);

CREATE TABLE acceptance_rows (
    run_id      bigint NOT NULL REFERENCES acceptance_runs (id) ON DELETE CASCADE,
    size_bytes  bigint NOT NULL,
    bucket      bigint NOT NULL,                    -- largest power of two <= size (core/busbw.py)
    count       bigint,
    type        text,
    redop       text,
    root        int,
    placement   text NOT NULL CHECK (placement IN ('out_of_place', 'in_place')),
    time_us     double precision NOT NULL,
    algbw_gbps  double precision NOT NULL,
    busbw_gbps  double precision NOT NULL,
    wrong       bigint                              -- NULL: N/A or no check column
);
CREATE INDEX acceptance_rows_run ON acceptance_rows (run_id, placement, bucket);

-- One row per job for the busbw_below_acceptance detector (service/alerts/busbw.py): the last step
-- judged and the run of consecutive steps below/above the fraction (JSON), so an episode fires once
-- and resolves once across restarts, and replicas share jobs (row lock, SKIP LOCKED).
CREATE TABLE busbw_alert_state (
    job         text PRIMARY KEY,
    last_step   bigint NOT NULL,
    state       jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
