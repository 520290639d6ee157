"""What keeps attribution fast on large jobs (#15 Scale) without changing its answers: the job's
topology is rebuilt only when its inputs change, series that can never be evidence are not scored,
the scoring arrays go to the database as literals that mean the same values, and the window values
computed from the window's samples in numpy are the database's to the bit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine, EngineConfig
from fabricscope.service.correlate import queries as q
from fabricscope.service.correlate import window as win
from fabricscope.service.correlate.localize import SIGNALS, SWITCH_ROLES, series_groups
from fabricscope.service.correlate.queries import pg_array, unsend_array
from fabricscope.service.simulate.generator import generate
from tests.correlate.scenarios import post
from tests.correlate.test_end_to_end import SPEC, STEPS, _send
from tests.correlate.test_rule_cause_backpressure import _topo


def test_topology_is_rebuilt_only_when_what_it_was_built_from_changes(service_url: str,
                                                                     db_conn: psycopg.Connection) -> None:
    """Past topo_ttl_s the engine checks the job's inputs (one query) and keeps its scoring set when
    nothing changed; a new checkpoint volume, a link or a rank placement makes it rebuild."""
    sc = _send(service_url, [], seed=81, name="stamp")
    eng = AttributionEngine(EngineConfig(topo_ttl_s=0.0))  # every call checks
    first = eng._job_topo(db_conn, sc.job)
    assert eng._job_topo(db_conn, sc.job) is first  # the same frames: nothing was rebuilt
    ranks, topo, _ = first
    hosts = set(ranks["host"])
    new_vol = next(v for v, r in sorted(topo.role.items())
                   if r == "volume" and topo.host_of[v] in hosts and v not in topo.checkpoint_volumes)
    db_conn.execute("INSERT INTO events (kind, source, job, start_ts) VALUES ('checkpoint', %s, %s, now())",
                    (new_vol, sc.job))
    second = eng._job_topo(db_conn, sc.job)
    assert second is not first and new_vol in second[1].checkpoint_volumes
    assert eng._job_topo(db_conn, sc.job) is second
    nic = next(s for s, r in topo.role.items() if r == "nic")
    db_conn.execute("DELETE FROM links WHERE a = %s OR b = %s", (nic, nic))
    third = eng._job_topo(db_conn, sc.job)
    assert third is not second and nic not in third[1].peer
    db_conn.execute("UPDATE job_ranks SET nic = NULL WHERE job = %s AND rank = 0", (sc.job,))
    fourth = eng._job_topo(db_conn, sc.job)
    assert fourth is not third and fourth[0]["nic"].isna().sum() == 1


def test_a_new_series_rebuilds_the_scoring_set_only_when_it_is_the_jobs(service_url: str,
                                                                        db_conn: psycopg.Connection) -> None:
    sc = _send(service_url, [], seed=82, name="series")
    eng = AttributionEngine(EngineConfig(topo_ttl_s=0.0))
    first = eng._job_topo(db_conn, sc.job)
    db_conn.execute("INSERT INTO sources (name, device, interface) VALUES ('zq7:k2', 'zq7', 'k2')")
    db_conn.execute("INSERT INTO series (source_id, metric_id, labels) SELECT s.id, m.id, '{}' FROM sources s, "
                    "metrics m WHERE s.name = 'zq7:k2' AND m.name = 'rx_fcs_errors_total'")
    second = eng._job_topo(db_conn, sc.job)
    assert second[2] is first[2]  # another device's series: the job's scoring set stays
    nic = next(s for s, r in first[1].role.items() if r == "nic")
    new_id = db_conn.execute(
        "INSERT INTO series (source_id, metric_id, labels) SELECT s.id, m.id, '{\"lane\": \"1\"}' FROM sources s, "
        "metrics m WHERE s.name = %s AND m.name = 'rx_fcs_errors_total' RETURNING id", (nic,)).fetchone()
    third = eng._job_topo(db_conn, sc.job)
    assert new_id is not None and third[2] is not first[2] and new_id[0] in set(third[2]["series_id"])


def test_series_that_can_never_be_evidence_are_not_scored() -> None:
    """A (role, metric) pair with no SIGNALS row (a NIC's CNPs sent, a switch port's CNPs handled) is
    never a candidate, whatever its score: series_groups leaves it out of the per-step scoring."""
    topo = _topo()
    nic = next(s for s, r in topo.role.items() if r == "nic")
    port = next(s for s, r in topo.role.items() if r == "leaf_down")
    meta = pd.DataFrame({"series_id": [1, 2, 3, 4], "source": [nic, nic, port, port],
                         "metric": ["cnp_sent_total", "ecn_marked_packets_total", "cnp_handled_total",
                                    "ecn_marked_packets_total"],
                         "kind": "counter", "labels": "{}"})
    g = series_groups(meta, topo)
    assert sorted(g["series_id"]) == [2, 4]
    empty = series_groups(meta.iloc[:0], topo)  # a job with no telemetry yet
    assert empty.empty and {"series_id", "grp", "gauge", "floor", "net", "solo", "lookback"} <= set(empty.columns)
    assert all(("switch" if r in SWITCH_ROLES else r, m) in SIGNALS
               for r, m in zip(g["role"], g["metric"], strict=True))


def test_array_literals_read_back_as_the_same_values(db_conn: psycopg.Connection) -> None:
    ints = np.array([0, -3, 2_000_000_000, 7])
    floats = np.array([0.1, -2.5e-12, 1e300, np.inf, -np.inf, np.nan, 1 / 3])
    bools = np.array([True, False, True])
    got = db_conn.execute("SELECT %s::int[], %s::float8[], %s::bool[], %s::int[]",
                          (pg_array(ints), pg_array(floats), pg_array(bools), pg_array(np.array([], int)))).fetchone()
    assert got is not None
    assert got[0] == ints.tolist() and got[2] == bools.tolist() and got[3] == []
    np.testing.assert_array_equal(np.array(got[1], float), floats)  # exact, NaN where NaN


def test_window_arithmetic_in_numpy_is_the_databases_to_the_bit(db_conn: psycopg.Connection) -> None:
    """What outliers() moved out of SQL: array_send's bytes, date_part('epoch'), to_timestamp()'s
    rounding and percentile_cont(0.5) per group give exactly the values the database does."""
    rng = np.random.default_rng(3)
    us = 1.6e15 + rng.integers(0, 10**11, 400)
    secs = [float(x) for x in (us / 1e6 + 946684800.0 + rng.normal(0, 1e-7, len(us)))]
    vals = np.append(rng.normal(0, 1e3, 399), np.nan)
    grp = rng.integers(0, 7, len(vals[:-1]))
    with db_conn.cursor(binary=True) as cur:
        r = cur.execute(
            "SELECT array_send(array_agg(ts ORDER BY i)), array_send(array_agg(date_part('epoch', ts) ORDER BY i)), "
            "array_send(array_agg(v ORDER BY i)), array_send(array_agg(g ORDER BY i)), "
            "array_send(array_agg(to_timestamp(s) ORDER BY i)) FROM unnest(%s::float8[], %s::int[], %s::float8[], "
            "%s::float8[]) WITH ORDINALITY AS u(us, g, v, s, i), LATERAL (SELECT timestamptz '2000-01-01 UTC' "
            "+ us * interval '1 microsecond' AS ts) t",
            (pg_array(us), pg_array(np.append(grp, 0)), pg_array(vals), pg_array(np.array(secs))),
            prepare=False).fetchone()
    assert r is not None
    ts = unsend_array(r[0], ">i8")
    np.testing.assert_array_equal(ts, us.astype(np.int64))
    np.testing.assert_array_equal(win.epoch_s(ts), unsend_array(r[1], ">f8"))
    np.testing.assert_array_equal(unsend_array(r[2], ">f8"), vals)
    np.testing.assert_array_equal(unsend_array(r[3], ">i4"), np.append(grp, 0))
    np.testing.assert_array_equal(unsend_array(r[4], ">i8"), [win.pg_us(x) for x in secs])
    got = db_conn.execute("SELECT g, percentile_cont(0.5) WITHIN GROUP (ORDER BY v) FROM unnest(%s::int[], "
                          "%s::float8[]) AS u(g, v) GROUP BY g ORDER BY g",
                          (pg_array(grp), pg_array(vals[:-1]))).fetchall()
    med = win._median_by(grp, vals[:-1])
    assert [(g, float(m)) for g, m in got] == sorted({(int(g), float(m)) for g, m in zip(grp, med, strict=True)})


def test_the_bitmap_scan_reads_what_the_scan_by_ids_reads(service_url: str, db_conn: psycopg.Connection,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A large job's window is read by time range with a bitmap of its series (WINDOW_BITS_SQL): every
    series' window value, peer median, MAD and z are the ones the scan by ids gives."""
    # names of its own, so its series are stored together, one id after the other: the bitmap spans
    # the job's lowest to highest series id, and series other tests stored between the first
    # ones of shared names and this job's new ones (a bench run replayed) made it too long to send
    sc = post(service_url, generate(replace(SPEC, names=8383), job="e2e-bitmap-own-names", steps=STEPS, faults=[],
                                    seed=83, t0=1.7945e9))
    _, _, meta = AttributionEngine()._job_topo(db_conn, sc.job)
    arrays = q.scoring_arrays(meta)
    assert "bits" in arrays.lit
    for s in range(2, STEPS, 7):
        ws = sc.t0 + float(sc.timeline.start[s].min())
        we = sc.t0 + float(sc.timeline.end[s].max()) + 1.0
        got = []
        for bitmap in (False, True):
            monkeypatch.setattr(win, "use_bitmap", lambda *_, b=bitmap: b)
            out, have = q.outliers(db_conn, meta=meta, ws=ws, we=we, min_z=-math.inf, limit=10**6, arrays=arrays)
            got.append((out.sort_values("series_id").reset_index(drop=True), have))
        assert got[0][1] == got[1][1] > 0, (got[0][1], got[1][1], len(got[0][0]), len(got[1][0]), len(meta))
        pd.testing.assert_frame_equal(got[0][0], got[1][0], check_exact=True)


def test_the_topology_is_rebuilt_after_topo_rebuild_s_even_when_its_stamp_is_the_same(
        service_url: str, db_conn: psycopg.Connection) -> None:
    sc = _send(service_url, [], seed=83, name="rebuild")
    eng = AttributionEngine(EngineConfig(topo_ttl_s=0.0, topo_rebuild_s=0.0))
    first = eng._job_topo(db_conn, sc.job)
    again = eng._job_topo(db_conn, sc.job)
    assert again is not first and again[2] is not first[2] and again[1] == first[1]


def test_a_steps_collectives_read_as_arrays_are_the_rows_and_a_null_seq_falls_back_to_rows(
        db_conn: psycopg.Connection) -> None:
    job = "coll-arrays"
    rows = [(0, 5, 0.25), (1, 5, 0.5), (0, 6, 1.0 / 3.0), (1, 6, 2.0 ** -30)]
    with db_conn.cursor() as cur:
        cur.execute("DELETE FROM collectives WHERE job = %s", (job,))
        cur.executemany("INSERT INTO collectives (job, rank, step, seq, op, start_ts, end_ts, duration_s) "
                        "VALUES (%s, %s, 3, %s, 'allreduce', now(), now(), %s)", [(job, *r) for r in rows])
        cur.execute("INSERT INTO collectives (job, rank, step, seq, op, start_ts, end_ts, duration_s) "
                    "VALUES (%s, 2, 4, NULL, 'allreduce', now(), now(), 0.5)", (job,))
    got = q._collectives(db_conn, job=job, step=3)
    assert [tuple(r) for r in got.itertuples(index=False)] == rows
    assert got["rank"].dtype == got["seq"].dtype == np.int64 and got["duration_s"].dtype == np.float64
    null_seq = q._collectives(db_conn, job=job, step=4)
    assert len(null_seq) == 1 and null_seq["seq"].isna().all()
    assert q._collectives(db_conn, job=job, step=5).empty
