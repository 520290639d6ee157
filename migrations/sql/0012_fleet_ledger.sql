-- The fleet ledger (issue 48): GPU-seconds lost per (job, UTC day, layer, component), rolled from the
-- engine's attributions by the `fleet` job of `fabricscope serve` (service/fleet/rollup.py). Daily
-- rows, not hourly: a 30-day ranking over 1,000 jobs reads a few thousand rows from the covering
-- index, never the attributions' JSON.
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
-- The ranking reads (day, ...) with every column it sums in the index: an index-only scan.
CREATE INDEX fleet_ledger_day ON fleet_ledger (day) INCLUDE (component, layer, kind, job, gpu_s, slow_steps,
                                                             first_seen, last_seen);
-- One component's rows (worst jobs, evidence, incidents).
CREATE INDEX fleet_ledger_component ON fleet_ledger (component, day) INCLUDE (job, gpu_s, evidence, evidence_n);

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
