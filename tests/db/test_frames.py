"""Sample frames and counter increments (service/db/frames.py, migration 0009): the ingest writer
keeps them beside `samples` in the same transaction; the engine reads a step's window and its
link-down look-back from them, and gets the same values as from the sample rows. Real database, the
real ingest API for the engine's part."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine, framed
from fabricscope.service.correlate import window as win
from fabricscope.service.correlate.localize import FLOORS
from fabricscope.service.db import frames
from fabricscope.service.db.database import _alembic_config
from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.ingest.validate import SampleColumns
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from fabricscope.service.workers import retention
from tests.correlate.scenarios import post
from tests.support import TestDatabase


def _cols(rows: list[tuple[float, str, str, float]]) -> SampleColumns:
    ts, src, met, val = zip(*rows, strict=True)
    return SampleColumns(np.array(ts, float), list(src), list(met), np.array(val, float), [""] * len(rows), None)


def _copy_rows(payload: bytes) -> list[tuple[int, int, int, np.ndarray]]:
    """(bucket, count, part, records) of each row of a FRAMES_COPY payload."""
    rows, off = [], len(frames.HEADER)
    while payload[off:off + 2] != frames.TRAILER:
        bucket, count = np.frombuffer(payload, ">i8", 1, off + 6)[0], np.frombuffer(payload, ">i4", 1, off + 18)[0]
        part = np.frombuffer(payload, ">i2", 1, off + 26)[0]
        size = int(np.frombuffer(payload, ">i4", 1, off + 28)[0])
        rows.append((int(bucket), int(count), int(part), frames.decode([payload[off + 32:off + 32 + size]])))
        off += 32 + size
    return rows


def _frame_records(conn: psycopg.Connection, sids: list[int]) -> np.ndarray:
    with conn.cursor(binary=True) as cur:
        payloads = [r[0] for r in cur.execute("SELECT payload FROM sample_frames").fetchall()]
    rec = frames.decode(payloads)
    rec = rec[np.isin(rec["sid"], sids)]
    return rec[np.lexsort((rec["ts"], rec["sid"]))]


def test_the_writer_frames_every_sample_and_keeps_link_down_rises(database_url: str) -> None:
    host = f"fr{uuid.uuid4().hex[:8]}"
    t0 = time.time() - 300 + 0.25
    writer = SampleWriter()
    batches = [  # two writes, each over two seconds, a counter, a gauge and a link-down counter
        [(t0, f"{host}:eth0", "rx_bytes_total", 1e12), (t0, f"{host}:eth0", "temperature_celsius", 41.5),
         (t0, f"{host}:eth0", "link_down_total", 7.0), (t0 + 1, f"{host}:eth0", "rx_bytes_total", 1e12 + 5e9),
         (t0 + 1, f"{host}:eth0", "link_down_total", 7.0)],
        [(t0 + 2, f"{host}:eth0", "rx_bytes_total", 1e12 + 9e9), (t0 + 2, f"{host}:eth0", "link_down_total", 9.0),
         (t0 + 3, f"{host}:eth0", "temperature_celsius", 43.0), (t0 + 3, f"{host}:eth0", "link_down_total", 9.0)],
    ]
    with psycopg.connect(database_url) as conn:
        for b in batches:
            with conn.transaction():
                written = writer.write_samples(conn, _cols(b))
            writer.committed(written)
        stored = conn.execute(
            "SELECT s.series_id, (extract(epoch FROM s.ts - timestamptz '2000-01-01 UTC') * 1e6)::bigint, s.value,"
            " coalesce(s.rate, 'NaN'), m.name FROM samples s JOIN series se ON se.id = s.series_id"
            " JOIN sources src ON src.id = se.source_id JOIN metrics m ON m.id = se.metric_id"
            " WHERE src.name = %s ORDER BY 1, 2", (f"{host}:eth0",)).fetchall()
        sids = sorted({r[0] for r in stored})
        rec = _frame_records(conn, sids)
        link = [r[0] for r in stored if r[4] == "link_down_total"][0]
        rises = conn.execute("SELECT rate FROM counter_increments WHERE series_id = %s", (link,)).fetchall()
    assert len(stored) == 9
    assert rec["sid"].tolist() == [r[0] for r in stored]
    assert rec["ts"].tolist() == [r[1] for r in stored]
    # a counter's rate (NaN where none: its first sample), a gauge's value
    want = [r[3] if r[4].endswith("_total") else r[2] for r in stored]
    assert np.array_equal(rec["x"], np.array(want, float), equal_nan=True)
    assert rises == [(2.0,)]  # 7 -> 9 over one second; the flat seconds and the first sample are no rises
    # the link-down counter (a metric the engine scores) in frames of its own; the rest apart
    with psycopg.connect(database_url) as conn, conn.cursor(binary=True) as cur:
        parts = cur.execute("SELECT part, payload FROM sample_frames").fetchall()
    part_of = {int(sid): p for p, payload in parts for sid in frames.decode([payload])["sid"] if sid in sids}
    assert {part_of[r[0]] for r in stored if r[4] == "link_down_total"} == {frames.PART_SCORED}
    assert {part_of[r[0]] for r in stored if r[4] != "link_down_total"} == {frames.PART_OTHER}


def test_the_frames_scored_part_holds_every_metric_the_engine_scores() -> None:
    """The window reads the scored part only (framed.FRAMES_SQL): a metric the engine scores that the
    writer put in the other part would never be seen."""
    assert set(FLOORS) == frames.SCORED_METRICS


def test_a_write_of_both_parts_is_framed_per_part_in_time_order() -> None:
    rng = np.random.default_rng(4)
    n = 900
    ts_us = np.sort(rng.integers(5_000_000, 8_000_000, n))  # three seconds, in time order as collectors send
    sid, x = rng.integers(1, 50, n), rng.random(n)
    part = np.where(sid % 3 == 0, frames.PART_OTHER, frames.PART_SCORED).astype(np.int8)
    rows = _copy_rows(frames.frames_copy_payload(ts_us, sid, x, part=part))
    assert all(set(np.where(r["sid"] % 3 == 0, frames.PART_OTHER, frames.PART_SCORED)) == {p} for _, _, p, r in rows)
    for p in (frames.PART_SCORED, frames.PART_OTHER):
        got = np.concatenate([r for _, _, q, r in rows if q == p])
        assert got["ts"].tolist() == ts_us[part == p].tolist() and got["x"].tolist() == x[part == p].tolist()
    assert sum(c for _, c, _, _ in rows) == n and {p for _, _, p, _ in rows} == {1, 2}


def test_frames_written_before_parts_are_read_whole_after_the_upgrade(test_database: TestDatabase,
                                                                      tmp_path: Path) -> None:
    """Migration 0010: a frame written at 0009 holds every metric (part 0); the window still reads
    it, and skips a frame of the other part written after."""
    from alembic import command

    db = TestDatabase.create(test_database.admin_url, tmp_path)
    try:
        cfg = _alembic_config(db.url)
        rec = np.zeros(2, frames.RECORD)
        rec["sid"], rec["ts"], rec["x"] = [7, 8], [1_000_000, 1_200_000], [1.5, 2.5]
        with psycopg.connect(db.url, autocommit=True) as conn:
            command.downgrade(cfg, "0009_sample_frames")
            conn.execute("INSERT INTO sample_frames (bucket, n, payload) VALUES ('2000-01-01 00:00:01+00', 2, %s)",
                         (rec.tobytes(),))
            command.upgrade(cfg, "head")
            conn.execute("INSERT INTO sample_frames (bucket, n, part, payload) VALUES"
                         " ('2000-01-01 00:00:01+00', 1, %s, %s)", (frames.PART_OTHER, rec[:1].tobytes()))
            sc = win.Scoring(ids=np.array([7, 8]), grp=np.zeros(2, np.int64), gauge=np.ones(2, bool),
                             floor=np.ones(2), net=np.ones(2, bool), solo=np.zeros(2, bool), lit={},
                             member=np.isin(np.arange(9), [7, 8]))
            ws = 946_684_800.0 + 0.5
            got, _ = framed.window_samples(conn, sc, ws=ws, hi=ws + 2, we=ws + 2)
    finally:
        db.drop()
    assert got.sid.tolist() == [7, 8] and got.value.tolist() == [1.5, 2.5]


def test_the_engine_reads_the_same_window_from_frames_as_from_samples(service_url: str,
                                                                       db_conn: psycopg.Connection,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
    cl = build_cluster(spec)
    rng = np.random.default_rng(5)
    faults = [make_fault(cl, "link_flap", start_step=30, steps=6, severity=0.3, rng=rng),
              make_fault(cl, "fabric_congestion", start_step=44, steps=6, severity=0.2, rng=rng)]
    sc = post(service_url, generate(spec, job=f"frames-{uuid.uuid4().hex[:6]}", steps=56, faults=faults, seed=5,
                                    t0=1.784e9))  # a time range no other test of this database uses
    seen: list[tuple[Any, ...]] = []
    real_values, real_lookback = win.window_values, win.with_lookback
    monkeypatch.setattr(win, "window_values", lambda *a: seen.append(("w", *real_values(*a))) or seen[-1][1:])
    monkeypatch.setattr(win, "with_lookback", lambda *a: seen.append(("l", *real_lookback(*a))) or seen[-1][1:])
    monkeypatch.setattr(win, "use_frames", lambda sc, n: True)  # a test job is a small share of the database
    engine = AttributionEngine()
    slow = [s for s in range(56) if sc.truth[s].slow]
    assert len(slow) >= 8
    for s in slow:
        engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
    from_frames = list(seen)
    seen.clear()
    monkeypatch.setattr(framed, "frames_cover", lambda conn, ws: False)  # sample rows, LOOKBACK_SQL
    engine.clear_caches()
    for s in slow:
        engine.attribute_step(db_conn, job=sc.job, step=s, store=False)
    assert len(from_frames) == len(seen) >= 2 * len(slow)
    for a, b in zip(from_frames, seen, strict=True):
        assert a[0] == b[0] and len(a[1]) > 100
        for x, y in zip(a[1:], b[1:], strict=True):
            assert np.array_equal(x, y, equal_nan=True)
    # the flap's rises were read from counter_increments, and they stood out in a look-back
    rises = db_conn.execute("SELECT count(*) FROM counter_increments ci JOIN series se ON se.id = ci.series_id"
                            " JOIN sources src ON src.id = se.source_id WHERE src.name = ANY(%s)",
                            (sorted(set(sc.streams.sources)),)).fetchone()
    assert rises is not None and rises[0] > 0


def test_a_database_upgraded_with_samples_reads_samples_until_frames_began(db_conn: psycopg.Connection) -> None:
    with db_conn.transaction(force_rollback=True):
        db_conn.execute("UPDATE sample_frames_since SET since = now()")
        now = time.time()
        assert not framed.frames_cover(db_conn, now - 60)
        assert framed.frames_cover(db_conn, now + 60)
    assert framed.frames_cover(db_conn, 0.0)  # a database created at 0009: frames from the start


def test_upgrading_a_database_that_holds_samples_starts_frames_at_the_upgrade(test_database: TestDatabase,
                                                                            tmp_path: Path) -> None:
    """Migration 0009 on a database with samples already stored: frames cover only what comes after
    the upgrade (windows before it read `samples`); on an empty one, everything."""
    from alembic import command

    db = TestDatabase.create(test_database.admin_url, tmp_path)
    try:
        cfg = _alembic_config(db.url)
        with psycopg.connect(db.url, autocommit=True) as conn:
            assert framed.frames_cover(conn, 0.0)  # created at head: frames from the start
            command.downgrade(cfg, "0008_brin_autosummarize")
            conn.execute("INSERT INTO samples VALUES (now() - interval '1 hour', 1, 1.0, NULL)")
            command.upgrade(cfg, "head")
            now = time.time()
            assert not framed.frames_cover(conn, now - 600)
            assert framed.frames_cover(conn, now + 60)
    finally:
        db.drop()


def test_retention_deletes_old_frames_and_increments(db_conn: psycopg.Connection) -> None:
    payload = frames.frames_copy_payload(np.array([0], np.int64), np.array([1], np.int64), np.array([1.0]))
    with db_conn.transaction(force_rollback=True):
        with db_conn.cursor() as cur, cur.copy(frames.FRAMES_COPY) as cp:
            cp.write(payload)  # 2000-01-01
        db_conn.execute("INSERT INTO counter_increments VALUES (1, '1990-01-01', 1.0), (1, '2001-01-01', 1.0)")
        db_conn.execute("INSERT INTO sample_frames VALUES ('1990-01-01', 0, ''::bytea)")
        # a cut-off in 1999: the other tests' simulated jobs (2020 on) stay
        retention(db_conn, days=int((time.time() - 915_148_800) // 86_400))
        left = db_conn.execute("SELECT count(*) FROM sample_frames WHERE bucket < '2000-06-01'").fetchone()
        inc = db_conn.execute("SELECT count(*) FROM counter_increments WHERE ts < '2001-06-01'").fetchone()
    assert left == (1,) and inc == (1,)


def test_samples_out_of_time_order_are_sorted_as_before() -> None:
    """A late write puts a series' older sample after its newer one: the window sorts by time anyway."""
    sid = np.array([5, 3, 5, 3, 5])
    t = np.array([2.0, 1.0, 1.0, 3.0, 4.0])
    s = win.Samples(sid, t, np.arange(5.0), np.full(5, np.nan))
    got, later = win.first_after(s, t > 3.5)
    assert got.sid.tolist() == [3, 3, 5, 5, 5] and got.t.tolist() == [1.0, 3.0, 1.0, 2.0, 4.0]
    assert got.value.tolist() == [1.0, 3.0, 2.0, 0.0, 4.0] and later.tolist() == [5]


def test_a_frame_holds_one_write_and_second_and_at_most_frame_max_records() -> None:
    """A write out of time order, with more samples in one second than a frame holds: every record is
    kept, in time order per second, each frame within one second and under the cap (its heap page)."""
    rng = np.random.default_rng(3)
    n = frames.FRAME_MAX_RECORDS * 2 + 17
    ts_us = rng.integers(5_000_000, 7_000_000, n)  # two seconds, shuffled
    sid = rng.integers(1, 50, n)
    x = rng.random(n)
    rows = [(b, c, r) for b, c, _, r in _copy_rows(frames.frames_copy_payload(ts_us, sid, x))]
    assert all(0 < c <= frames.FRAME_MAX_RECORDS and len(r) == c for _, c, r in rows)
    assert all((r["ts"] // frames.FRAME_US == b // frames.FRAME_US).all() for b, _, r in rows)
    got = np.concatenate([r for _, _, r in rows])
    order = np.argsort(ts_us // frames.FRAME_US, kind="stable")  # by second, the write's order within it
    assert got["sid"].tolist() == sid[order].tolist() and got["x"].tolist() == x[order].tolist()
    assert sum(c for _, c, _ in rows) == n and len(rows) >= 4
