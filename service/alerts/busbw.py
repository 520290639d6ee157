"""The `busbw_below_acceptance` alert: a job's bus bandwidth stays below a fraction of its fabric's
acceptance baseline. `run_once` is called periodically by service/workers.py.

Per step, the job's fraction is the median, over that step's collective records with a baseline
(same op, size bucket and rank count, else the nearest smaller; service/acceptance/efficiency.py),
of achieved / baseline busbw. Steps with no record to compare are neutral. The alert fires once
when `alert_busbw_steps` consecutive steps are below `alert_busbw_fraction`, and resolves when as
many consecutive steps are at or above it: the hysteresis is the anti-flap, so the resolve notice
is sent at once (no cooldown hold). One open alert per (job, kind) is guaranteed by the unique
index `alerts_one_firing`; the open alert, not the detector state, says whether it fires.

Only jobs with a `fabric` label are judged. A step is judged once every known rank reported
collectives for it, or `alert_step_lag` newer steps exist (as the step-regression engine does).
One transaction per job: state, alert change and queued notifications commit together.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field
from typing import Any, Literal

import psycopg
from psycopg.types.json import Jsonb

from fabricscope.service.acceptance.efficiency import step_fractions
from fabricscope.service.alerts import payloads, store
from fabricscope.service.alerts.perjob import claim_state, run_jobs
from fabricscope.service.settings import Settings

log = logging.getLogger("fabricscope.alerts")

KIND = payloads.BUSBW_KIND
MAX_STEPS_PER_RUN = 5_000  # per job and run; the rest waits for the next run


@dataclass
class Episode:
    """Consecutive steps below / at-or-above the fraction (pure; JSON state)."""

    fraction: float
    steps: int
    firing: bool = False
    below: int = 0
    above: int = 0
    since_step: int | None = None
    since_ts: float | None = None
    recent: list[float] = field(default_factory=list)  # the last `steps` step fractions
    episode: int = 0  # steps below in the current (or last) episode, from its first step below

    def update(self, step: int, ts: float, value: float) -> Literal["fire", "resolve"] | None:
        self.recent = [*self.recent, value][-self.steps:]
        if value < self.fraction:
            if self.below == 0:
                self.since_step, self.since_ts = step, ts
            self.below, self.above = self.below + 1, 0
            if self.firing:
                self.episode += 1
            elif self.below >= self.steps:
                self.firing, self.episode = True, self.below
                return "fire"
        else:
            self.below, self.above = 0, self.above + 1
            if self.firing and self.above >= self.steps:
                self.firing = False
                return "resolve"
        return None

    def to_state(self) -> dict[str, Any]:
        return {"below": self.below, "above": self.above, "since_step": self.since_step, "since_ts": self.since_ts,
                "recent": self.recent, "episode": self.episode}

    @classmethod
    def from_state(cls, state: dict[str, Any], *, fraction: float, steps: int, firing: bool) -> Episode:
        return cls(fraction, steps, firing, int(state.get("below", 0)), int(state.get("above", 0)),
                   state.get("since_step"), state.get("since_ts"), list(state.get("recent", []))[-steps:],
                   int(state.get("episode", 0)))


def run_once(conn: psycopg.Connection, *, settings: Settings) -> dict[str, int]:
    return run_jobs(conn, jobs_sql="SELECT name FROM jobs WHERE labels ? 'fabric' ORDER BY name",
                    what="busbw alerts", run_job=lambda job: _run_job(conn, job, settings))


def _run_job(conn: psycopg.Connection, job: str, settings: Settings) -> tuple[int, int, int]:
    with conn.transaction():
        claimed = claim_state(conn, table="busbw_alert_state", job=job)
        if claimed is None:
            return 0, 0, 0  # another replica is on it
        last, state = claimed[0], claimed[1] or {}
        top_row = conn.execute("SELECT max(step) FROM collectives WHERE job = %s", (job,)).fetchone()
        top = None if top_row is None or top_row[0] is None else int(top_row[0])
        if top is None or top <= last:
            return 0, 0, 0
        if last == -2:  # first sight: judge recent history only
            last = max(-1, top - settings.alert_backfill_steps - 1)
        ranks_row = conn.execute("SELECT count(*) FROM job_ranks WHERE job = %s", (job,)).fetchone()
        expected = int(ranks_row[0]) if ranks_row else 0
        open_ = conn.execute("SELECT id FROM alerts WHERE job = %s AND kind = %s AND state = 'firing'",
                             (job, KIND)).fetchone()
        ep = Episode.from_state(state, fraction=settings.alert_busbw_fraction, steps=settings.alert_busbw_steps,
                                firing=open_ is not None)
        fired = resolved = n = 0
        window_end, waiting = last + MAX_STEPS_PER_RUN, False
        for step, nranks, ts, value, _compared in step_fractions(conn, job=job, after=last,
                                                                 max_steps=MAX_STEPS_PER_RUN):
            if nranks < expected and step > top - settings.alert_step_lag:
                waiting = True  # not all ranks in yet; later steps wait too (the episode is sequential)
                break
            last, n = step, n + 1
            if value is None:
                continue
            tr = ep.update(step, ts, value)
            if tr == "fire":
                fired += _fire(conn, job, ep, step, settings)
            elif tr == "resolve":
                resolved += _resolve(conn, job, ep, step, settings)
        if not waiting and window_end < top:
            last = window_end  # a gap in the step numbers wider than the window: move past it
        if ep.firing:
            _refresh(conn, job, ep, last, settings)
        conn.execute("UPDATE busbw_alert_state SET last_step = %s, state = %s, updated_at = now() WHERE job = %s",
                     (last, Jsonb(ep.to_state()), job))
    return n, fired, resolved


def _summary(conn: psycopg.Connection, job: str, ep: Episode, settings: Settings) -> dict[str, Any]:
    fab = conn.execute("SELECT labels ->> 'fabric' FROM jobs WHERE name = %s", (job,)).fetchone()
    return {"fabric": fab[0] if fab else None, "fraction": statistics.median(ep.recent) if ep.recent else None,
            "min_fraction": min(ep.recent, default=None), "threshold": settings.alert_busbw_fraction,
            "steps_required": settings.alert_busbw_steps}


def _fire(conn: psycopg.Connection, job: str, ep: Episode, step: int, settings: Settings) -> int:
    row = conn.execute(
        """INSERT INTO alerts (job, kind, state, started_at, since_step, detected_at, detected_step, last_step,
                               steps, summary)
           VALUES (%s, %s, 'firing', to_timestamp(%s), %s, now(), %s, %s, %s, %s)
           ON CONFLICT (job, kind) WHERE state = 'firing' DO NOTHING RETURNING id""",
        (job, KIND, ep.since_ts, ep.since_step, step, step, ep.episode, Jsonb(_summary(conn, job, ep, settings)))
    ).fetchone()
    if row is None:  # already open (state lost under an open alert): one episode, one alert
        return 0
    alert = store.get_alert(conn, int(row[0]))
    assert alert is not None
    queued = store.enqueue(conn, alert, status="firing", event=KIND)
    log.warning("alert %s firing: job %s bus bandwidth below %.2f of acceptance since step %s (%d notifications "
                "queued)", alert["id"], job, settings.alert_busbw_fraction, ep.since_step, queued)
    return 1


def _resolve(conn: psycopg.Connection, job: str, ep: Episode, step: int, settings: Settings) -> int:
    row = conn.execute(
        """UPDATE alerts SET state = 'resolved', resolved_at = now(), resolved_step = %s, last_step = %s,
                  steps = %s, summary = %s, updated_at = now()
           WHERE job = %s AND kind = %s AND state = 'firing' RETURNING id""",
        (step, step, ep.episode, Jsonb(_summary(conn, job, ep, settings)), job, KIND)).fetchone()
    if row is None:
        return 0
    alert = store.get_alert(conn, int(row[0]))
    assert alert is not None
    queued = store.enqueue(conn, alert, status="resolved", event=KIND)
    log.info("alert %s resolved: job %s bus bandwidth back above %.2f of acceptance at step %s (%d notifications "
             "queued)", alert["id"], job, settings.alert_busbw_fraction, step, queued)
    return 1


def _refresh(conn: psycopg.Connection, job: str, ep: Episode, last: int, settings: Settings) -> None:
    """Keep the open alert's running numbers (recent fraction, steps below) fresh."""
    conn.execute("""UPDATE alerts SET last_step = %s, steps = %s, summary = %s, updated_at = now()
                    WHERE job = %s AND kind = %s AND state = 'firing'""",
                 (last, ep.episode, Jsonb(_summary(conn, job, ep, settings)), job, KIND))
