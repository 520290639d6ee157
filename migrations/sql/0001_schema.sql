-- fabricscope schema, plain PostgreSQL >= 15. TimescaleDB objects are added by timescale.sql when the
-- extension is available (applied by `fabricscope migrate`, re-appliable).

-- Dictionaries keep the time-series rows narrow: (ts, series_id, value, rate).
CREATE TABLE sources (
    id          serial PRIMARY KEY,
    name        text NOT NULL UNIQUE,           -- 'leaf1:Ethernet12', 'node07:mlx5_2', 'node07'
    device      text NOT NULL,
    interface   text,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sources_device ON sources (device);

CREATE TABLE metrics (
    id    serial PRIMARY KEY,
    name  text NOT NULL UNIQUE,
    kind  text NOT NULL CHECK (kind IN ('counter', 'gauge'))
);

CREATE TABLE series (
    id         serial PRIMARY KEY,
    source_id  int NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    metric_id  int NOT NULL REFERENCES metrics (id) ON DELETE CASCADE,
    labels     jsonb NOT NULL DEFAULT '{}'::jsonb,
    UNIQUE (source_id, metric_id, labels)
);
CREATE INDEX series_metric ON series (metric_id);

-- value: raw counter or gauge; rate: per-second rate computed by the server with 32/64-bit wrap and
-- reset handling (NULL when no trustworthy rate exists: first point, reset, out of order).
CREATE TABLE samples (
    ts         timestamptz NOT NULL,
    series_id  int NOT NULL,
    value      double precision NOT NULL,
    rate       double precision
);
CREATE INDEX samples_series_ts ON samples (series_id, ts DESC);
CREATE INDEX samples_ts_brin ON samples USING brin (ts) WITH (pages_per_range = 32);

-- Inventory and topology.
CREATE TABLE devices (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('switch', 'host', 'storage')),
    attrs       jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE interfaces (
    device     text NOT NULL REFERENCES devices (name) ON DELETE CASCADE,
    name       text NOT NULL,
    speed_bps  double precision,
    attrs      jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (device, name)
);

-- Undirected links between two sources; declared (PUT /v1/topology) and/or discovered (LLDP).
CREATE TABLE links (
    id          serial PRIMARY KEY,
    a           text NOT NULL,
    b           text NOT NULL,
    speed_bps   double precision,
    declared    boolean NOT NULL DEFAULT true,
    discovered  boolean NOT NULL DEFAULT false,
    last_seen   timestamptz,
    CHECK (a <> b)
);
CREATE UNIQUE INDEX links_pair ON links (LEAST(a, b), GREATEST(a, b));

CREATE TABLE jobs (
    name        text PRIMARY KEY,
    labels      jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job_ranks (
    job         text NOT NULL REFERENCES jobs (name) ON DELETE CASCADE,
    rank        int NOT NULL,
    host        text NOT NULL,
    local_rank  int,
    gpu         text,
    nic         text,
    attrs       jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (job, rank)
);

-- Training timings (from the hook or importers).
CREATE TABLE steps (
    job         text NOT NULL,
    rank        int NOT NULL,
    step        bigint NOT NULL,
    start_ts    timestamptz NOT NULL,
    end_ts      timestamptz NOT NULL,
    duration_s  double precision NOT NULL,
    phases      jsonb
);
CREATE INDEX steps_job_step ON steps (job, step);
CREATE INDEX steps_start_brin ON steps USING brin (start_ts);

CREATE TABLE collectives (
    job         text NOT NULL,
    rank        int NOT NULL,
    step        bigint,
    seq         bigint,
    op          text NOT NULL,
    bytes       bigint,
    start_ts    timestamptz NOT NULL,
    end_ts      timestamptz NOT NULL,
    duration_s  double precision NOT NULL,
    group_name  text,
    group_size  int
);
CREATE INDEX collectives_job_step ON collectives (job, step);
CREATE INDEX collectives_start_brin ON collectives USING brin (start_ts);

CREATE TABLE events (
    id        bigserial PRIMARY KEY,
    kind      text NOT NULL,
    source    text NOT NULL,
    job       text,
    start_ts  timestamptz NOT NULL,
    end_ts    timestamptz,
    attrs     jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX events_start ON events (start_ts);
CREATE INDEX events_source ON events (source, start_ts);
CREATE INDEX events_job ON events (job, start_ts) WHERE job IS NOT NULL;

-- Idempotent ingest: a batch id seen once is never applied twice.
CREATE TABLE ingest_batches (
    batch_id     text PRIMARY KEY,
    kind         text NOT NULL,
    accepted     int NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ingest_batches_received ON ingest_batches (received_at);

-- Answers of the correlation engine, one row per job step.
CREATE TABLE attributions (
    job          text NOT NULL,
    step         bigint NOT NULL,
    computed_at  timestamptz NOT NULL DEFAULT now(),
    step_start   timestamptz,
    slow         boolean NOT NULL,
    duration_s   double precision,
    baseline_s   double precision,
    layer        text NOT NULL,
    component    text,
    confidence   double precision,
    lost_s       double precision,
    evidence     jsonb NOT NULL DEFAULT '[]'::jsonb,
    causes       jsonb NOT NULL DEFAULT '[]'::jsonb,
    PRIMARY KEY (job, step)
);
CREATE INDEX attributions_slow ON attributions (job, step) WHERE slow;

-- Alerts and webhooks.
CREATE TABLE alerts (
    id           bigserial PRIMARY KEY,
    job          text NOT NULL,
    kind         text NOT NULL DEFAULT 'step_regression',
    state        text NOT NULL CHECK (state IN ('firing', 'resolved')),
    started_at   timestamptz NOT NULL,
    since_step   bigint,
    resolved_at  timestamptz,
    baseline_s   double precision,
    current_s    double precision,
    lost_s       double precision,
    summary      jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alerts_job_state ON alerts (job, state);

CREATE TABLE webhooks (
    id          bigserial PRIMARY KEY,
    url         text NOT NULL,
    secret      text,
    format      text NOT NULL DEFAULT 'generic' CHECK (format IN ('generic', 'slack', 'pagerduty')),
    events      text[] NOT NULL DEFAULT ARRAY['step_regression'],
    active      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE deliveries (
    id               bigserial PRIMARY KEY,
    webhook_id       bigint NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    alert_id         bigint REFERENCES alerts (id) ON DELETE SET NULL,
    event            text NOT NULL,
    idempotency_key  text NOT NULL,
    body             bytea NOT NULL,
    state            text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         int NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_status      int,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (webhook_id, idempotency_key)
);
CREATE INDEX deliveries_due ON deliveries (next_attempt_at) WHERE state = 'pending';

-- Work partitioning between several engine/alert workers (scale-out).
CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL
);

-- Names instead of ids, for Grafana and people.
CREATE VIEW sample_view AS
SELECT s.ts, src.name AS source, src.device, src.interface, m.name AS metric, se.labels, s.value, s.rate
FROM samples s
JOIN series se ON se.id = s.series_id
JOIN sources src ON src.id = se.source_id
JOIN metrics m ON m.id = se.metric_id;
