-- Alerts and webhook delivery, second pass (issue 7): detector state, alert bookkeeping, delivery
-- attempts log, a 'cancelled' delivery state (held resolve notifications of a flapping alert).

-- One detector per job; its state (baseline window, CUSUM, open excursion) is JSON so it survives
-- restarts and several service replicas can share the work (row lock, SKIP LOCKED).
CREATE TABLE alert_state (
    job         text PRIMARY KEY,
    last_step   bigint NOT NULL,
    state       jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE alerts
    ADD COLUMN detected_at    timestamptz,   -- when it fired (started_at: start of the first regressed step)
    ADD COLUMN detected_step  bigint,
    ADD COLUMN last_step      bigint,
    ADD COLUMN resolved_step  bigint,
    ADD COLUMN steps          int NOT NULL DEFAULT 0,
    ADD COLUMN reopened       int NOT NULL DEFAULT 0,
    -- a reopened alert carries the earlier episodes' totals; lost_s/steps = prior + current episode
    ADD COLUMN prior_lost_s   double precision NOT NULL DEFAULT 0,
    ADD COLUMN prior_steps    int NOT NULL DEFAULT 0;
-- At most one open regression per job: the dedup the engine relies on.
CREATE UNIQUE INDEX alerts_one_firing ON alerts (job, kind) WHERE state = 'firing';
CREATE INDEX alerts_started ON alerts (started_at DESC);

ALTER TABLE webhooks
    ADD COLUMN name         text,
    ADD COLUMN routing_key  text;           -- PagerDuty integration key; write-only like secret

ALTER TABLE deliveries DROP CONSTRAINT IF EXISTS deliveries_state_check;
ALTER TABLE deliveries ADD CONSTRAINT deliveries_state_check
    CHECK (state IN ('pending', 'delivered', 'failed', 'cancelled'));
ALTER TABLE deliveries
    ADD COLUMN status      text;            -- 'firing' | 'resolved' (the alert transition notified)
CREATE INDEX deliveries_webhook ON deliveries (webhook_id, id DESC);
CREATE INDEX deliveries_alert ON deliveries (alert_id);

CREATE TABLE delivery_attempts (
    id           bigserial PRIMARY KEY,
    delivery_id  bigint NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    at           timestamptz NOT NULL DEFAULT now(),
    status       int,
    error        text,
    duration_s   double precision
);
CREATE INDEX delivery_attempts_delivery ON delivery_attempts (delivery_id, id);
