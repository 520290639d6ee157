"""NCCL RAS in the hang answer: the ranks NCCL's own liveness service finds dead, unresponsive or
missing, from the host agents' ``nccl_ras`` events (collectors/host/nccl_ras_client.py).

An event counts for a job when it carries the job, or carries none and comes from a host the job
has ranks on (``<host>:nccl-ras``: the agent's own name); only each source's newest event within
``hang_ras_recent_s`` is read, so a report that cleared takes its ranks back. RAS names a rank of a
communicator, not of the job: it is taken as the job's rank only in a communicator as large as the
job (the world communicator, where the two are the same). A rank named by several reports keeps the
gravest state (dead, then unresponsive, then missing).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

SOURCE = "nccl_ras"
STATES = {"dead": "ras_dead", "unresponsive": "ras_unresponsive", "missing": "ras_missing"}
_GRAVITY = {s: i for i, s in enumerate(STATES.values())}


@dataclass(frozen=True)
class RasFact:
    rank: int
    state: str  # ras_dead, ras_unresponsive, ras_missing
    comm: str  # the communicator's hash
    ras_host: str | None  # the address RAS names the rank's node by
    pid: int | None


def recent_reports(conn: psycopg.Connection, job: str, *, since: float) -> list[dict[str, Any]]:
    """The attributes of the newest ``nccl_ras`` event of each source about ``job`` since ``since``."""
    rows = conn.execute(
        """SELECT DISTINCT ON (e.source) e.attrs FROM events e
           WHERE e.kind = 'nccl_ras' AND e.start_ts >= to_timestamp(%s)
             AND (e.job = %s OR (e.job IS NULL AND split_part(e.source, ':', 1) IN
                                 (SELECT host FROM job_ranks WHERE job = %s)))
           ORDER BY e.source, e.start_ts DESC""", (since, job, job)).fetchall()
    return [r[0] for r in rows if isinstance(r[0], dict)]


def facts(reports: Iterable[dict[str, Any]], world: int) -> dict[int, RasFact]:
    """Per job rank, the gravest RAS state of the reports (ranks of the world-sized communicators)."""
    out: dict[int, RasFact] = {}
    for attrs in reports:
        ranks = attrs.get("ranks")
        for r in ranks if isinstance(ranks, list) else ():
            if not isinstance(r, dict) or r.get("nranks") != world or r.get("state") not in STATES:
                continue
            rank = r.get("rank")
            if type(rank) is not int or not 0 <= rank < world:
                continue
            fact = RasFact(rank, STATES[r["state"]], str(r.get("comm")), r.get("host"), r.get("pid"))
            cur = out.get(rank)
            if cur is None or _GRAVITY[fact.state] < _GRAVITY[cur.state]:
                out[rank] = fact
    return out


def merge(suspects: list[dict[str, Any]], waiting: list[int], found: dict[int, RasFact],
          hosts: dict[int, str]) -> tuple[list[dict[str, Any]], list[int]]:
    """The collective-record suspects with the RAS facts: a rank both name keeps one entry per group
    with both states (``state``, ``ras_state``); a rank only RAS names gets one entry of its own
    (``source`` ``nccl_ras``, no group, seq or op; the API says ``collectives`` for the others). A RAS
    suspect is no longer counted as waiting."""
    out = [s | _ras(f) if (f := found.get(s["rank"])) is not None else s for s in suspects]
    named = {s["rank"] for s in suspects}
    out += [{"rank": f.rank, "host": hosts.get(f.rank), "group": None, "seq": None, "op": None, "state": f.state,
             "source": SOURCE, **_ras(f)} for f in found.values() if f.rank not in named]
    out.sort(key=lambda s: (s["rank"], s["group"] or ""))
    return out, [r for r in waiting if r not in found]


def _ras(f: RasFact) -> dict[str, Any]:
    return {"ras_state": f.state, "ras_comm": f.comm, "ras_host": f.ras_host, "ras_pid": f.pid}
