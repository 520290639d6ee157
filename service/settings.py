"""One Settings object for the whole service (environment variables, optional ``.env``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from fabricscope.service import contract


def _default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("fabricscope", appauthor=False))


class Settings(BaseSettings):
    """fabricscope settings. Every field is ``FABRICSCOPE_<NAME>``; the database also reads ``DATABASE_URL``."""

    model_config = SettingsConfigDict(env_prefix="FABRICSCOPE_", env_file=".env", extra="ignore")

    database_url: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("DATABASE_URL", "FABRICSCOPE_DATABASE_URL")
    )
    data_dir: Path = Field(default_factory=_default_data_dir)
    embedded_port: int = Field(default=54329, ge=1, le=65535)

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    # Ingest limits: a batch over max_batch items is 413, so is a body over max_body_bytes (on every route).
    max_batch: int = Field(default=50_000, ge=1)
    max_body_bytes: int = Field(default=64 << 20, ge=1024)
    # Timestamps outside [min_ts, now + max_future_s] are rejected with 422 naming the field.
    min_ts: float = contract.MIN_TS  # 2000-01-01
    max_future_s: float = contract.MAX_FUTURE_S
    # When true, samples/events for sources whose device is not in the topology are rejected (422).
    strict_sources: bool = False

    # "TOKEN:scope1,scope2;TOKEN2:admin" — empty means no auth. Scopes: ingest, read, admin.
    tokens: SecretStr | None = None

    pool_size: int = Field(default=20, ge=1)
    db_timeout_s: float = Field(default=3.0, gt=0)
    retry_after_s: int = Field(default=5, ge=1)

    # --- limits and timeouts (#18): docs/security.md "Limits and timeouts"
    # Requests queued for a database connection beyond the pool; more are told 429 at once. A wait
    # longer than db_timeout_s while every connection is in use is 429 too (busy), not 503 (down).
    pool_max_waiting: int = Field(default=40, ge=1)
    busy_retry_after_s: int = Field(default=1, ge=1)
    # Units of reads running at once (service/api/admission.py): a read that can hold a connection for
    # seconds (job report, steps list, efficiency, trends) is a unit, every other read a share of one
    # by its cost; more wait up to db_timeout_s, then 429. The rest of the pool stays free for
    # ingest, so neither a few report readers nor a flood of cheap reads can starve the feeds.
    max_heavy_reads: int = Field(default=4, ge=1)
    # The HTTP server: the request line and headers must arrive within http_header_timeout_s and
    # http_max_header_bytes (else the connection is closed, 408/431), a body within http_body_timeout_s
    # (else 408); idle keep-alive connections close after http_keep_alive_s; over http_max_connections
    # open connections a request is told 429; a stop waits http_shutdown_timeout_s for requests in flight.
    http_header_timeout_s: float = Field(default=10.0, gt=0)
    http_max_header_bytes: int = Field(default=64 << 10, ge=4096)
    http_body_timeout_s: float = Field(default=60.0, gt=0)
    http_keep_alive_s: int = Field(default=5, ge=1)
    http_max_connections: int = Field(default=512, ge=1)
    http_backlog: int = Field(default=2048, ge=1)
    http_shutdown_timeout_s: int = Field(default=8, ge=1)
    # #46 item 9: at a stop, a background job still running this long after the requests had
    # theirs is cancelled (its statement), so a stop is bounded
    background_stop_grace_s: float = Field(default=2.0, ge=0)
    # --- per-client fairness (#46): docs/security.md "Per-client limits". A client is its peer address.
    # Open connections per client; over it the client's oldest idle connection is closed, or the new one
    # is refused (429) when none is idle. With more than http_idle_pressure of http_max_connections open,
    # the oldest idle connection of the client holding the most is closed for each new one.
    http_max_connections_per_client: int = Field(default=128, ge=1)
    http_idle_pressure: float = Field(default=0.75, gt=0, le=1)
    # A response whose client reads nothing for this long is aborted, which frees its slot and connection.
    http_write_timeout_s: float = Field(default=10.0, gt=0)
    # Of max_heavy_reads, what one client may hold at once; more is 429 at once, without waiting.
    max_heavy_reads_per_client: int = Field(default=2, ge=1)
    # The cheap reads (one share: a read by its key, a short list, a metric of a few series) pass a gate of
    # their own, apart from the expensive ones: at most max_cheap_reads at once, max_cheap_reads_per_client
    # of one client (more is 429 at once). A client's reports never take its lookups' room, nor the reverse.
    max_cheap_reads: int = Field(default=8, ge=1)
    max_cheap_reads_per_client: int = Field(default=4, ge=1)

    retention_days: int = Field(default=30, ge=1)
    compress_after_days: int = Field(default=2, ge=1)
    # --- TimescaleDB (#47): docs/configuration.md "TimescaleDB". auto: used where installed and
    # preloaded (the embedded server preloads it when its lib holds it); require: stop without it; off: never.
    timescaledb: Literal["auto", "require", "off"] = "auto"

    # Background work inside `serve`: correlation, alerting, retention (seconds; 0 disables).
    correlate_interval_s: float = Field(default=5.0, ge=0)
    # #44 item 7: steps are judged as they arrive (ingest wakes the worker, service/arrival.py), the
    # interval above staying as the safety net; off: on the interval only. A wake waits
    # correlate_debounce_s first, so a burst (every rank's post of one step) makes one pass.
    correlate_on_arrival: bool = True
    correlate_debounce_s: float = Field(default=0.2, ge=0, le=10)
    alert_interval_s: float = Field(default=10.0, ge=0)
    retention_interval_s: float = Field(default=3600.0, ge=0)

    # --- trends and rollup (#19): docs/configuration.md "Trends"
    rollup_interval_s: float = Field(default=60.0, ge=0)  # the rollup job (service/trends/rollup.py); 0 disables
    # (job, hour) pairs rolled per run at most; the jobs take turns and the hours of one go a chunk per
    # statement, so the time budget is the real bound (#46 item 8; was 48: 50,000 hours took 17 h)
    rollup_batch_hours: int = Field(default=20_000, ge=1)
    rollup_budget_s: float = Field(default=30.0, gt=0)  # wall time per run at most; the rest waits for the next
    trends_max_points: int = Field(default=1000, ge=10)  # time buckets per series: a smaller step is a 422
    trends_max_series: int = Field(default=100, ge=1)  # series per answer, largest first; the rest is cut
    trends_jump_threshold: float = Field(default=0.25, gt=0)  # comm fraction over its trailing median by this much
    trends_jump_window: int = Field(default=24, ge=2)  # trailing buckets the median is taken over
    trends_jump_min_points: int = Field(default=3, ge=1)  # buckets needed before a jump can be called

    # --- the fleet ledger (#48): docs/configuration.md "Fleet ledger"
    fleet_interval_s: float = Field(default=60.0, ge=0)  # the ledger's rollup + its alerts (service/fleet); 0 disables
    fleet_overlap_s: float = Field(default=600.0, ge=0)  # attributions this much older than the watermark re-read
    fleet_alerts: bool = True  # component_degraded and the digest, after each roll (off: the ledger only)
    fleet_alert_window_days: int = Field(default=1, ge=1, le=90)  # component_degraded: trailing UTC days summed
    fleet_alert_gpu_hours: float = Field(default=50.0, gt=0)  # ...fires at this many GPU-hours lost in the window
    fleet_alert_jobs: int = Field(default=5, ge=1)  # ...or at this many distinct jobs slowed in the window
    fleet_alert_clear_ratio: float = Field(default=0.5, gt=0, le=1)  # resolves below this fraction of both bars
    fleet_digest_hour: int | None = Field(default=None, ge=0, le=23)  # daily fleet_digest at this UTC hour; unset: off
    fleet_digest_top: int = Field(default=10, ge=1, le=100)  # components in the digest

    # Step-time regression alerts (service/alerts). Detector: CUSUM over the robust baseline.
    alert_min_regression: float = Field(default=0.03, gt=0, lt=10)  # smallest sustained slowdown to alert on
    alert_threshold: float = Field(default=10.0, gt=0)  # CUSUM decision interval, in baseline noise units
    alert_min_steps: int = Field(default=20, ge=1)  # a regression must last this many steps to fire
    alert_recovery_steps: int = Field(default=20, ge=1)  # steps back near baseline to resolve
    alert_baseline_window: int = Field(default=100, ge=20)  # healthy steps in the baseline
    alert_backfill_steps: int = Field(default=1000, ge=0)  # a job new to the detector is judged from this far back
    alert_step_lag: int = Field(default=2, ge=0)  # a step is judged once all ranks reported or this many newer exist
    alert_cooldown_s: float = Field(default=300.0, ge=0)  # resolve notices held this long; a relapse reopens
    # --- acceptance baselines and bus bandwidth efficiency (#19)
    # busbw_below_acceptance fires when a job's per-step busbw fraction of its fabric's acceptance
    # baseline stays below alert_busbw_fraction for alert_busbw_steps consecutive steps; it resolves
    # after as many consecutive steps at or above it. The job report warns below the same fraction.
    alert_busbw_fraction: float = Field(default=0.8, gt=0, le=10)
    alert_busbw_steps: int = Field(default=20, ge=1)
    # --- hangs (#45 item 4, service/hang): a job is hung when no step ends for longer than
    # max(hang_floor_s, hang_factor x its median step time); an announced checkpoint in progress
    # holds that off for up to hang_checkpoint_s (a long checkpoint is a long step, not a hang).
    hang_factor: float = Field(default=5.0, gt=1, le=1000)
    hang_floor_s: float = Field(default=120.0, gt=0)
    hang_checkpoint_s: float = Field(default=3600.0, ge=0)
    # a hung job's suspects include the ranks the newest NCCL RAS report (host agents' nccl_ras events)
    # of this age or younger names dead, unresponsive or missing; 0: RAS reports are not read
    hang_ras_recent_s: float = Field(default=300.0, ge=0)
    # --- GPU-to-NIC placement audit (#17): GPUs a NIC is meant to serve before the audit flags
    # shared_nic (a job label gpus_per_nic overrides it per job).
    placement_gpus_per_nic: int = Field(default=1, ge=1, le=1024)
    # Webhook delivery: its own background job, never in the ingest or attribution path.
    delivery_interval_s: float = Field(default=5.0, ge=0)
    delivery_timeout_s: float = Field(default=5.0, gt=0)  # per HTTP attempt
    delivery_batch: int = Field(default=50, ge=1)  # attempts per run at most
    delivery_budget_s: float = Field(default=30.0, gt=0)  # wall time per run at most
    delivery_backoff_s: float = Field(default=5.0, gt=0)  # first retry delay; doubles per attempt
    delivery_backoff_max_s: float = Field(default=900.0, gt=0)
    delivery_max_age_s: float = Field(default=86_400.0, gt=0)  # then the delivery is given up (state failed)
    # --- webhook delivery, destinations and secrets at rest (#18)
    # delivery_timeout_s above is the deadline of a whole attempt (connect, send, answer), not per read.
    delivery_concurrency: int = Field(default=8, ge=1, le=64)  # receivers sent to at once
    # Webhooks may not target loopback, link-local, private or metadata addresses unless listed here:
    # comma-separated addresses/CIDRs ("127.0.0.1,10.20.0.0/16") and host names ("hooks.corp", "*.corp").
    webhook_allow_destinations: str = ""
    # Fernet keys for webhook secrets and routing keys in the database, comma-separated, newest first
    # (older ones still decrypt). Unset: one generated at first start in <data_dir>/secret.key (0600).
    # Checked where used (service/alerts/secretbox.py): a validation error here would print the value.
    secret_keys: SecretStr | None = None

    @field_validator("webhook_allow_destinations")
    @classmethod
    def _allowlist(cls, v: str) -> str:
        import ipaddress
        import re

        for entry in filter(None, (e.strip() for e in v.split(","))):
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                if not re.fullmatch(r"(\*\.)?[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?", entry):
                    raise ValueError(f"{entry!r} is neither an address/CIDR nor a host name") from None
        return v

    log_level: str = "INFO"
    log_json: bool = False

    # Scale-out (docs/scaling.md). "direct": HTTP ingest writes to the database; "nats": it validates,
    # then publishes to NATS JetStream and `fabricscope writer` processes write.
    ingest_mode: Literal["direct", "nats"] = "direct"
    # One URL or a comma-separated list (a NATS cluster); may hold user:password, hence secret.
    nats_url: SecretStr = SecretStr("nats://127.0.0.1:4222")
    nats_stream: str = Field(default="FABRICSCOPE_INGEST", pattern=r"^[A-Za-z0-9_-]+$")
    nats_consumer: str = Field(default="fabricscope-writers", pattern=r"^[A-Za-z0-9_-]+$")
    nats_replicas: int = Field(default=1, ge=1, le=5)  # 3 on a NATS cluster
    # The stream is a work queue: it holds only what writers have not committed yet. When full,
    # publishers are refused (they spool / get 503) instead of old data being discarded.
    nats_max_bytes: int = Field(default=8 << 30, ge=1 << 20)
    nats_max_age_s: float = Field(default=7 * 86_400.0, gt=0)
    nats_dedupe_window_s: float = Field(default=120.0, ge=0)  # Nats-Msg-Id duplicate window
    nats_timeout_s: float = Field(default=5.0, gt=0)  # publish acknowledgement timeout
    # Writers: messages per fetch, unacknowledged messages over all writers (back-pressure), and
    # how long a fetched message may stay unacknowledged before it is redelivered.
    writer_fetch: int = Field(default=16, ge=1, le=1000)
    writer_max_ack_pending: int = Field(default=256, ge=1)
    writer_ack_wait_s: float = Field(default=60.0, ge=1)

    @field_validator("log_level")
    @classmethod
    def _upper(cls, v: str) -> str:
        v = v.upper()
        if v not in {"DEBUG", "INFO", "WARNING", "ERROR"}:
            raise ValueError("log_level must be DEBUG, INFO, WARNING or ERROR")
        return v

    def token_scopes(self) -> dict[str, frozenset[str]]:
        if self.tokens is None or not self.tokens.get_secret_value().strip():
            return {}
        out: dict[str, frozenset[str]] = {}
        for part in self.tokens.get_secret_value().split(";"):
            if not part.strip():
                continue
            token, _, scopes = part.strip().partition(":")
            out[token] = frozenset(s.strip() for s in (scopes or "ingest,read").split(",") if s.strip())
        return out


@lru_cache
def get_settings() -> Settings:
    return Settings()
