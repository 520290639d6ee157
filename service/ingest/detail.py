"""The service's requests for full collective detail (#45 item 3), and the data access around them.

A rank in bounded mode (``FABRICSCOPE_COLLECTIVE_DETAIL=bounded``) sends one summary per step and full
records only for slow, sampled and requested steps. Here: what the hook polls (``pending``), what an
operator or the service posts (``request``), and the helper for a judge that finds a step slow but holds
no detail for it (``request_missing``): it asks every rank for that step, once.
"""

from __future__ import annotations

from typing import Any

import psycopg

MAX_AGE_S = 3600.0  # older requests are not answered: the hook's history holds minutes, not hours
MAX_ANSWER = 256


def request(conn: psycopg.Connection, *, job: str, steps: list[int], ranks: list[int] | None = None,
            reason: str | None = None) -> list[dict[str, Any]]:
    """Ask for ``steps`` of ``ranks`` (None: every rank). A (step, rank) already asked for within
    MAX_AGE_S is not asked again; the requests made are returned."""
    out: list[dict[str, Any]] = []
    for step in sorted(set(steps)):
        for rank in (sorted(set(ranks)) if ranks is not None else [None]):
            row = conn.execute(
                """INSERT INTO detail_requests (job, step, rank, reason)
                   SELECT %(job)s, %(step)s, %(rank)s, %(reason)s
                   WHERE NOT EXISTS (SELECT 1 FROM detail_requests
                                      WHERE job = %(job)s AND step = %(step)s
                                        AND (rank IS NULL OR rank IS NOT DISTINCT FROM %(rank)s)
                                        AND requested_at > now() - make_interval(secs => %(age)s))
                   RETURNING id, step, rank, reason, requested_at""",
                {"job": job, "step": step, "rank": rank, "reason": reason, "age": MAX_AGE_S}).fetchone()
            if row is not None:
                out.append(_row(row))
    return out


def pending(conn: psycopg.Connection, *, job: str, rank: int | None, after: int = 0,
            limit: int = MAX_ANSWER) -> list[dict[str, Any]]:
    """The requests after id ``after`` that concern ``rank`` (None: all), oldest first, recent only."""
    rows = conn.execute(
        """SELECT id, step, rank, reason, requested_at FROM detail_requests
            WHERE job = %s AND id > %s AND (%s::int IS NULL OR rank IS NULL OR rank = %s)
              AND requested_at > now() - make_interval(secs => %s)
            ORDER BY id LIMIT %s""", (job, after, rank, rank, MAX_AGE_S, limit)).fetchall()
    return [_row(r) for r in rows]


def steps_without_detail(conn: psycopg.Connection, *, job: str, steps: list[int]) -> list[int]:
    """Of ``steps``, those some rank summarized but sent no record of (its detail was not sampled)."""
    rows = conn.execute(
        """SELECT DISTINCT s.step FROM collective_summaries s
            WHERE s.job = %(job)s AND s.step = ANY(%(steps)s)
              AND NOT EXISTS (SELECT 1 FROM collectives c
                               WHERE c.job = %(job)s AND c.step = s.step AND c.rank = s.rank)
            ORDER BY 1""", {"job": job, "steps": list(steps)}).fetchall()
    return [int(r[0]) for r in rows]


def request_missing(conn: psycopg.Connection, *, job: str, steps: list[int],
                    reason: str = "slow step without detail") -> list[dict[str, Any]]:
    """For a judge (the attribution worker, the steps listing) that found ``steps`` slow: ask every rank
    for those of them whose detail some rank did not send. Cheap when nothing is missing (one indexed
    read); idempotent (a step already asked for is not asked again)."""
    missing = steps_without_detail(conn, job=job, steps=steps)
    return request(conn, job=job, steps=missing, reason=reason) if missing else []


# Recent steps a slow verdict asks detail for: the hook keeps its last 64 steps' records
# (FABRICSCOPE_DETAIL_HISTORY's default); an older step's records are gone, so asking costs a row
# and answers nothing.
RECENT_STEPS = 64


def ask_for_slow_steps(conn: psycopg.Connection, *, job: str, recent: int = RECENT_STEPS) -> list[dict[str, Any]]:
    """After a judge stored its verdicts for ``job``: the slow steps among its ``recent`` newest judged
    ones that some rank summarized without records are asked of every rank (once each). Nothing for a
    job that sends every record (it has no summaries)."""
    slow = [int(r[0]) for r in conn.execute(
        """SELECT step FROM attributions WHERE job = %(job)s AND slow
              AND step > (SELECT max(step) FROM attributions WHERE job = %(job)s) - %(recent)s
              AND EXISTS (SELECT 1 FROM collective_summaries WHERE job = %(job)s)""",
        {"job": job, "recent": recent}).fetchall()]
    return request_missing(conn, job=job, steps=slow) if slow else []


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    return {"id": int(r[0]), "step": int(r[1]), "rank": r[2], "reason": r[3], "requested_at": r[4]}


__all__ = ["ask_for_slow_steps", "pending", "request", "request_missing", "steps_without_detail"]
