"""What a job's collectives table would hold had its ranks run the hook in bounded mode (#45 item 3).

``thin(conn, job, sample_by)`` first writes the per-step summaries every rank sends in bounded mode
(``collective_summaries``: per rank, step, op, size bucket and group size, from the stored records as
the hook's ``_summarize`` makes them), then replays each rank's stored steps and collectives through the hook's own
:class:`~fabricscope.collectors.training.volume.BoundedDetail` (the same slow flag, sample and
settings as in a training process, ``FABRICSCOPE_DETAIL_*`` from the environment; no server
requests) and deletes the collective rows it would not have sent. ``bench/attribution.py
--bounded-detail rank|step`` uses it to measure attribution accuracy with bounded detail on the
simulator's scenarios.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import psycopg

from fabricscope.collectors.training.volume import BoundedDetail, VolumeSettings


def kept_rank_steps(conn: psycopg.Connection, job: str, sample_by: str) -> tuple[set[tuple[int, int]], int]:
    """(the (rank, step) pairs whose records a bounded hook sends, the rank-steps with records)."""
    steps = conn.execute("SELECT rank, step, extract(epoch FROM start_ts), extract(epoch FROM end_ts) FROM steps"
                         " WHERE job = %s ORDER BY rank, step", (job,)).fetchall()
    have = conn.execute("SELECT DISTINCT rank, step FROM collectives WHERE job = %s AND step IS NOT NULL",
                        (job,)).fetchall()
    world = len({r for r, _, _, _ in steps})
    by_rank: dict[int, list[tuple[Any, ...]]] = {}
    for row in steps:
        by_rank.setdefault(int(row[0]), []).append(row)
    with_records = {(int(r), int(s)) for r, s in have}
    kept: set[tuple[int, int]] = set()
    for rank, rows in by_rank.items():
        kept |= {(rank, s) for s in _sent_steps(rank, rows, with_records, world, sample_by)}
    return kept, len(with_records)


def _sent_steps(rank: int, rows: list[tuple[Any, ...]], with_records: set[tuple[int, int]], world: int,
                sample_by: str) -> set[int]:
    sent: set[int] = set()

    def submit(kind: str, item: dict[str, Any]) -> None:
        if kind == "collectives":
            sent.add(item["step"])

    settings = dataclasses.replace(VolumeSettings.from_env(os.environ), sample_by=sample_by)  # FABRICSCOPE_DETAIL_*
    vol = BoundedDetail(settings, submit, lambda: rank, lambda: world)
    for _, step, start, end in rows:
        if (rank, int(step)) in with_records:  # one stand-in record: the decision is per rank-step
            vol.add({"rank": rank, "op": "all_reduce", "step": int(step), "start": float(start), "end": float(start)})
        vol.step_done(int(step), float(start), float(end), True)
    vol.tick(final=True)
    return sent


# The hook's summary of one (rank, step, op, size bucket, group size): bucket as volume.bucket (the
# largest power of 4 at or below the bytes, 0 without), the slowest record's group and seq.
SUMMARIES_SQL = """
INSERT INTO collective_summaries (job, rank, step, op, bucket, group_size, count, total_s, max_s, bytes,
                                  slowest_group, slowest_seq, start_ts, end_ts)
SELECT job, rank, step, op, b, coalesce(group_size, 0), count(*), sum(duration_s), max(duration_s), sum(bytes),
       (array_agg(group_name ORDER BY duration_s DESC))[1], (array_agg(seq ORDER BY duration_s DESC))[1],
       min(start_ts), max(end_ts)
FROM (SELECT c.*, CASE WHEN bytes IS NULL OR bytes < 1 THEN 0
                       ELSE 1::bigint << (2 * ((length(ltrim(bytes::bit(64)::text, '0')) - 1) / 2)) END AS b
      FROM collectives c WHERE job = %s AND step IS NOT NULL) x
GROUP BY job, rank, step, op, b, coalesce(group_size, 0)
"""


def summarize(conn: psycopg.Connection, job: str) -> int:
    """Write the summaries every rank of a bounded hook sends for every step; the rows written."""
    return conn.execute(SUMMARIES_SQL, (job,)).rowcount


def thin(conn: psycopg.Connection, job: str, sample_by: str = "rank") -> tuple[int, int]:
    """Write the job's per-step summaries, then delete its collective rows of rank-steps a bounded hook
    would not have sent in full; (rank-steps kept, rank-steps with records)."""
    summarize(conn, job)
    kept, total = kept_rank_steps(conn, job, sample_by)
    ranks = [r for r, _ in kept]
    steps = [s for _, s in kept]
    conn.execute("""DELETE FROM collectives c WHERE c.job = %s AND c.step IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM unnest(%s::int[], %s::bigint[]) k(rank, step)
                                     WHERE k.rank = c.rank AND k.step = c.step)""", (job, ranks, steps))
    return len(kept), total
