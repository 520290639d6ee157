-- The fleet ledger (issue 48): GPU-seconds lost per (job, UTC day, layer, component), rolled from the
-- engine's attributions by the `fleet` job of `fabricscope serve` (service/fleet/rollup.py), and two
-- summaries of it the rankings read: per (day, layer, component) over all jobs, per (job, day, layer).
-- Daily rows, not hourly: a ranking never reads the attributions' JSON, nor one row per job.
CREATE TABLE fleet_ledger (
    job          text NOT NULL,
    day          timestamptz NOT NULL,            -- UTC midnight of the slow steps' start
    layer        text NOT NULL,
    component    text NOT NULL,                   -- '' where the cause names no component
    kind         text NOT NULL,                   -- port | link | nic | gpu | host | volume | unknown
    ranks        int NOT NULL,                    -- the job's ranks: all of them wait on a slow step
    slow_steps   int NOT NULL,
    lost_s       double precision NOT NULL,       -- job wall seconds lost (excess x cause share)
    gpu_s        double precision NOT NULL,       -- lost_s x ranks
    first_seen   timestamptz NOT NULL,
    last_seen    timestamptz NOT NULL,
    evidence     text,                            -- the most frequent evidence ("metric on source")
    evidence_n   int NOT NULL DEFAULT 0,          -- how many of the slow steps carried it
    PRIMARY KEY (job, day, layer, component)
);
-- One component's rows (worst jobs, evidence, incidents).
CREATE INDEX fleet_ledger_component ON fleet_ledger (component, day) INCLUDE (job, gpu_s, evidence, evidence_n);

-- Per (UTC day, layer, component), all jobs summed: what the component ranking scans (a 30-day window
-- reads one row per component and day, whatever the number of jobs), index-only on fleet_daily_day.
-- Rebuilt for a day from fleet_ledger whenever one of its (job, day) pairs is rolled.
CREATE TABLE fleet_daily (
    day          timestamptz NOT NULL,
    layer        text NOT NULL,
    component    text NOT NULL,
    kind         text NOT NULL,
    jobs         int NOT NULL,                    -- jobs slowed that day (a job over several days counts each)
    slow_steps   bigint NOT NULL,
    gpu_s        double precision NOT NULL,
    first_seen   timestamptz NOT NULL,
    last_seen    timestamptz NOT NULL,
    PRIMARY KEY (day, layer, component)
);
CREATE INDEX fleet_daily_day ON fleet_daily (day) INCLUDE (component, layer, kind, gpu_s);
CREATE INDEX fleet_daily_component ON fleet_daily (component, day);

-- fleet_daily's GPU-seconds summed over aligned spans of 2^level days (level 0 to 5: 1 to 32 days, aligned
-- on 2000-01-01 as date_bin): any window of whole days is at most ~2 log2(days) spans, so the ranking's
-- scan reads about 8 rows per component for 30 days instead of 30. Rebuilt level by level (each from
-- the two spans below it) for the spans over the days a roll touched.
CREATE TABLE fleet_span (
    level        smallint NOT NULL,
    start        timestamptz NOT NULL,
    layer        text NOT NULL,
    component    text NOT NULL,
    kind         text NOT NULL,
    gpu_s        double precision NOT NULL,
    PRIMARY KEY (level, start, layer, component)
);
-- the ranking's scan, index-only: (level, start) of each span of the window, what it sums in the index
CREATE INDEX fleet_span_scan ON fleet_span (level, start) INCLUDE (component, layer, kind, gpu_s);

-- Per component and job, fleet_ledger's GPU-seconds and slow steps summed over the same aligned spans
-- (levels 0 to 5, rebuilt with fleet_span): a ranked component's jobs affected and worst jobs in a
-- window are an index-only range read of ~1 row per job and span (a job of 1-3 days sits in one or
-- two spans), where the day arrays of fleet_daily_jobs gave one element per job and day to unpack.
CREATE TABLE fleet_span_jobs (
    level        smallint NOT NULL,
    start        timestamptz NOT NULL,
    layer        text NOT NULL,
    component    text NOT NULL,
    job          text NOT NULL,
    kind         text NOT NULL,
    gpu_s        double precision NOT NULL,
    slow_steps   bigint NOT NULL,
    -- job before component: the roll rebuilds a span's rows of the jobs it rolled, by index
    PRIMARY KEY (level, start, job, layer, component)
);
-- the ranking's read for each of its top N components and each span of the window
CREATE INDEX fleet_span_jobs_component ON fleet_span_jobs (component, level, start)
    INCLUDE (layer, kind, job, gpu_s, slow_steps);

-- The same rows' detail, apart so that fleet_daily stays narrow for the ranking's scan: the day's jobs
-- with their GPU-seconds and slow steps (aligned arrays, by job), and the evidence labels with their
-- step counts. The ranking's evidence comes from here, never from fleet_ledger.
CREATE TABLE fleet_daily_jobs (
    component    text NOT NULL,
    day          timestamptz NOT NULL,
    layer        text NOT NULL,
    kind         text NOT NULL,
    job_names    text[] NOT NULL,
    job_gpu_s    double precision[] NOT NULL,
    job_steps    int[] NOT NULL,
    evidence     jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (component, day, layer)
);

-- Per (job, UTC day, layer), from the same roll as fleet_ledger: the layer ranking (its slow steps are
-- distinct steps, where the sum of a layer's component rows would count a step with two causes twice).
CREATE TABLE fleet_layer (
    job          text NOT NULL,
    day          timestamptz NOT NULL,
    layer        text NOT NULL,
    slow_steps   int NOT NULL,
    gpu_s        double precision NOT NULL,
    first_seen   timestamptz NOT NULL,
    last_seen    timestamptz NOT NULL,
    evidence     text,
    evidence_n   int NOT NULL DEFAULT 0,
    PRIMARY KEY (job, day, layer)
);
CREATE INDEX fleet_layer_day ON fleet_layer (day);

-- Which attributions changed since the last roll: computed_at is set on every (re)write.
CREATE INDEX IF NOT EXISTS attributions_computed ON attributions (computed_at);

-- The roll's watermark (one row): attributions computed after `through` minus the overlap are re-read.
CREATE TABLE fleet_watermark (
    id        boolean PRIMARY KEY DEFAULT true CHECK (id),
    through   timestamptz NOT NULL
);

-- The daily digest: the last UTC day one was queued for.
CREATE TABLE fleet_digest_sent (
    day      date PRIMARY KEY,
    sent_at  timestamptz NOT NULL DEFAULT now()
);
