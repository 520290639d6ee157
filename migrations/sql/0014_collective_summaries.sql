-- Bounded collective volume (#45 item 3). The hook in FABRICSCOPE_COLLECTIVE_DETAIL=bounded mode sends,
-- per rank and step, one summary per (op, size bucket, group size) instead of one row per collective,
-- and full records (table collectives) only for slow, requested and sampled steps.

-- Append-only, no unique key: a collective whose timing resolved after its step was summarized comes
-- as one more item of the same key, and readers sum a key's rows (count, total_s, bytes; max of max_s).
-- A retried batch is stored once by its batch id (ingest_batches). TimescaleDB makes it a hypertable on
-- start_ts (timescale.sql); on plain PostgreSQL the BRIN index and the retention job serve the same end.
CREATE TABLE collective_summaries (
    job            text NOT NULL,
    rank           int NOT NULL,
    step           bigint NOT NULL,
    op             text NOT NULL,
    bucket         bigint NOT NULL,             -- largest power of 4 <= bytes; 0: no bytes (barrier) or unknown
    group_size     int NOT NULL,                -- 0: unknown
    count          bigint NOT NULL,
    total_s        double precision NOT NULL,
    max_s          double precision NOT NULL,
    bytes          bigint,                      -- the sum of the records' bytes; NULL when none had any
    slowest_group  text,                        -- the slowest collective of the key: its group and seq
    slowest_seq    bigint,
    start_ts       timestamptz NOT NULL,        -- the first collective's start, the last one's end
    end_ts         timestamptz NOT NULL
);
CREATE INDEX collective_summaries_job_step ON collective_summaries (job, step);
CREATE INDEX collective_summaries_start_brin ON collective_summaries USING brin (start_ts);

-- Steps the service asks the ranks to send in full (GET /v1/jobs/{job}/detail_requests, polled by
-- the hook). rank NULL: every rank. Kept short: the hook's history is 64 steps by default.
CREATE TABLE detail_requests (
    id            bigserial PRIMARY KEY,
    job           text NOT NULL,
    step          bigint NOT NULL,
    rank          int,
    reason        text,
    requested_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX detail_requests_job_id ON detail_requests (job, id);
