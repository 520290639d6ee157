"""TimescaleDB on real chunks (#47): compression by the policy's own job, late rows into compressed
chunks, the engine's and the API's answers over compressed chunks, retention dropping chunks while
the rollups outlive them, and the continuous aggregate against the raw rows it summarises."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import Any

import httpx
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.db.database import migrate
from fabricscope.service.settings import Settings
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.send import HttpSink, send_scenario
from fabricscope.service.simulate.topology import ClusterSpec
from fabricscope.service.trends.rollup import roll_hour
from tests.support import REPO, ServiceProcess, TestDatabase
from tests.timescale.conftest import rolled, run_policy

SPEC = ClusterSpec(hosts=2, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS = 30
DAY = 86400.0


def _send(svc: ServiceProcess, job: str, t0: float, seed: int) -> Scenario:
    sc = generate(SPEC, job=job, steps=STEPS, faults=4, seed=seed, t0=t0)
    sink = HttpSink(svc.url)
    try:
        send_scenario(sink, sc)
    finally:
        sink.close()
    return sc


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


def _answers(conn: psycopg.Connection, svc: ServiceProcess, sc: Scenario) -> dict[str, Any]:
    """Every answer the data feeds: each step's attribution, the job report, efficiency, trends."""
    engine = AttributionEngine()  # a fresh one: nothing cached from the uncompressed reads
    steps = {s: dict(a) for s in range(STEPS) if (a := engine.attribute_step(conn, job=sc.job, step=s, store=False))}
    with httpx.Client(base_url=svc.url, timeout=120) as api:
        report = api.get(f"/v1/jobs/{sc.job}/report").json()
        efficiency = api.get(f"/v1/jobs/{sc.job}/efficiency").json()
        trends = api.get("/v1/trends", params={"metric": "comm_fraction", "job": sc.job, "step": 3600,
                                               "from": _iso(sc.t0 - 3600), "to": _iso(sc.t0 + 2 * 3600)}).json()
    return {"steps": steps, "report": report, "efficiency": efficiency, "trends": trends}


def _chunks(conn: psycopg.Connection, table: str) -> list[tuple[str, bool, datetime]]:
    return [(str(r[0]), bool(r[1]), r[2]) for r in conn.execute(
        "SELECT chunk_name, is_compressed, range_end FROM timescaledb_information.chunks "
        "WHERE hypertable_name = %s ORDER BY range_start", (table,))]


def _count(conn: psycopg.Connection, sql: str, *args: Any) -> int:
    row = conn.execute(sql, args).fetchone()
    return int(row[0]) if row else 0


def test_answers_over_compressed_chunks_are_the_uncompressed_ones(ts_db: TestDatabase, ts_svc: ServiceProcess) -> None:
    sc = _send(ts_svc, "ts-compressed", time.time() - 5 * DAY, seed=11)
    rolled(ts_db.url, sc.job)
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        before = _answers(conn, ts_svc, sc)
        assert any(a["slow"] for a in before["steps"].values()), "a scenario with slow steps to attribute"
        rows = {t: _count(conn, f"SELECT count(*) FROM {t}") for t in ("samples", "collectives")}
        for table in ("samples", "collectives"):
            assert not any(c for _, c, _ in _chunks(conn, table))
            run_policy(conn, "policy_compression", table)  # what the policy does two days after a chunk ends
            old = [c for _, c, end in _chunks(conn, table) if end.timestamp() < time.time() - 2 * DAY]
            assert old and all(old), (table, _chunks(conn, table))
            assert _count(conn, f"SELECT count(*) FROM {table}") == rows[table]
        after = _answers(conn, ts_svc, sc)
        migrate(ts_db.url, Settings(database_url=ts_db.url))  # type: ignore[arg-type]  # over compressed chunks
        assert _count(conn, "SELECT count(*) FROM samples") == rows["samples"]
    assert after["steps"] == before["steps"]
    for part in ("report", "efficiency", "trends"):
        assert after[part] == before[part], part


def test_late_rows_land_in_a_compressed_chunk(ts_db: TestDatabase, ts_svc: ServiceProcess) -> None:
    t0 = time.time() - 6 * DAY
    sc = _send(ts_svc, "ts-late", t0, seed=12)
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        run_policy(conn, "policy_compression", "samples")
        chunk = conn.execute("SELECT chunk_name FROM timescaledb_information.chunks WHERE hypertable_name = 'samples' "
                             "AND range_start <= to_timestamp(%s) AND range_end > to_timestamp(%s) AND is_compressed",
                             (t0 + 60, t0 + 60)).fetchone()
        assert chunk is not None, "the scenario's chunk is compressed"
        total = _count(conn, "SELECT count(*) FROM samples")
        source = sc.streams.sources[0]
        late = [{"ts": t0 + 60 + i + 0.5, "source": source, "metric": "late_probe_total", "value": float(10 * i)}
                for i in range(5)]
        r = httpx.post(f"{ts_svc.url}/v1/ingest/samples", json={"batch_id": "ts-late-1", "samples": late}, timeout=60)
        assert r.status_code == 200, r.text
        got = conn.execute("""SELECT s.value, s.rate FROM samples s JOIN series se ON se.id = s.series_id
                              JOIN metrics m ON m.id = se.metric_id WHERE m.name = 'late_probe_total' ORDER BY s.ts""")
        rows = got.fetchall()
        assert [v for v, _ in rows] == [0.0, 10.0, 20.0, 30.0, 40.0]
        assert [r for _, r in rows[1:]] == pytest.approx([10.0] * 4)  # rates computed across the late rows
        assert _count(conn, "SELECT count(*) FROM samples") == total + 5
        run_policy(conn, "policy_compression", "samples")  # the partly compressed chunk compressed again
        assert _count(conn, "SELECT count(*) FROM samples") == total + 5
        status = conn.execute("SELECT is_compressed FROM timescaledb_information.chunks WHERE chunk_name = %s",
                              (chunk[0],)).fetchone()
        assert status == (True,)


def test_retention_drops_chunks_and_the_rollups_outlive_them(ts_db: TestDatabase, ts_svc: ServiceProcess) -> None:
    t0 = time.time() - 40 * DAY  # older than the 30 days of retention
    sc = _send(ts_svc, "ts-retired", t0, seed=13)
    rolled(ts_db.url, sc.job)
    params = {"metric": "comm_fraction", "job": sc.job, "step": 3600, "from": _iso(t0 - 3600), "to": _iso(t0 + 7200)}
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        trend = httpx.get(f"{ts_svc.url}/v1/trends", params=params, timeout=60).json()
        assert trend["series"] and trend["series"][0]["points"], trend
        rollups = {t: _count(conn, f"SELECT count(*) FROM {t} WHERE job = %s", sc.job)
                   for t in ("step_rollup", "collective_rollup")}
        assert all(rollups.values()), rollups
        steps = _count(conn, "SELECT count(*) FROM steps WHERE job = %s", sc.job)
        old = ("SELECT count(*) FROM timescaledb_information.chunks "
               "WHERE hypertable_name = %s AND range_end < now() - INTERVAL '30 days'")
        assert _count(conn, old, "samples") and _count(conn, old, "collectives")
        for table in ("samples", "collectives"):
            run_policy(conn, "policy_retention", table)
            assert _count(conn, old, table) == 0, table
        assert _count(conn, "SELECT count(*) FROM collectives WHERE job = %s", sc.job) == 0
        assert _count(conn, "SELECT count(*) FROM samples WHERE ts < to_timestamp(%s)", t0 + STEPS * 3) == 0
        # what outlives the raw rows: the hourly rollups (and the trends read from them), and the steps
        assert {t: _count(conn, f"SELECT count(*) FROM {t} WHERE job = %s", sc.job) for t in rollups} == rollups
        assert _count(conn, "SELECT count(*) FROM steps WHERE job = %s", sc.job) == steps
        assert httpx.get(f"{ts_svc.url}/v1/trends", params=params, timeout=60).json() == trend


def test_continuous_aggregate_matches_the_raw_rows(ts_db: TestDatabase, ts_svc: ServiceProcess) -> None:
    t0 = time.time() - 3600
    sc = _send(ts_svc, "ts-cagg", t0, seed=14)
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        conn.execute("CALL refresh_continuous_aggregate('samples_1m', to_timestamp(%s), to_timestamp(%s))",
                     (t0 - 120, t0 + 3600))
        m0 = (t0 // 60 - 1) * 60  # whole minutes: both sides bucket the same rows
        window = (datetime.fromtimestamp(m0, UTC), datetime.fromtimestamp(m0 + 600, UTC))
        cagg = conn.execute("""SELECT bucket, series_id, rate, max_rate, value FROM samples_1m
                               WHERE bucket >= %s AND bucket < %s ORDER BY 1, 2""", window).fetchall()
        # the plain flavour's view (migrations/sql/plain.sql), over the same raw rows
        raw = conn.execute("""SELECT date_bin(INTERVAL '1 minute', ts, TIMESTAMPTZ '2000-01-01'), series_id, avg(rate),
                                     max(rate), (array_agg(value ORDER BY ts DESC))[1]
                              FROM samples WHERE ts >= %s AND ts < %s GROUP BY 1, 2 ORDER BY 1, 2""", window).fetchall()
    assert len(cagg) > 100 and len(cagg) == len(raw), sc.job
    for a, b in zip(cagg, raw, strict=True):
        assert a[:2] == b[:2]
        assert [x is None for x in a[2:]] == [x is None for x in b[2:]], (a, b)  # no rate: NULL on both
        assert [x for x in a[2:] if x is not None] == pytest.approx([x for x in b[2:] if x is not None], rel=1e-9)


def test_db_info_names_the_flavour_chunks_compression_and_policies(ts_db: TestDatabase,
                                                                    ts_svc: ServiceProcess) -> None:
    _send(ts_svc, "ts-info", time.time() - 4 * DAY, seed=15)
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        run_policy(conn, "policy_compression", "samples")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
    r = subprocess.run([sys.executable, "-m", "fabricscope", "db", "info"], cwd=REPO, capture_output=True, text=True,
                       env={**env, "DATABASE_URL": ts_db.url}, timeout=120, check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    out = r.stdout
    version = ts_db.flavour and ts_db.flavour.timescaledb_version
    assert f"flavour: timescaledb (TimescaleDB {version} on PostgreSQL" in out, out
    samples = re.search(r"samples: (\d+) chunks \(compression on, (\d+) compressed\)\n.*ratio (\d+\.\d)x", out)
    assert samples and int(samples[2]) >= 1 and float(samples[3]) > 1, out
    assert re.search(r"policy_compression on samples every .*: last run \S+ \S+ Success", out), out
    for line in ("policy_retention on samples", "policy_retention on collectives", "policy_compression on collectives",
                 "policy_refresh_continuous_aggregate on samples_1m"):
        assert line in out, out


def test_rollup_of_an_hour_in_a_chunk_never_analyzed_stays_fast(ts_db: TestDatabase) -> None:
    """TimescaleDB estimates a chunk before its first ANALYZE at about one row; the rollup's plan then
    nested a loop over the hour's steps and re-ran the comm aggregate for each (4+ minutes for
    `make run`'s job). 64 ranks x 150 steps in an hour of their own chunk, its statistics wiped."""
    job, hour = "ts-fresh-chunk", datetime(2025, 1, 1, 10, tzinfo=UTC)
    with psycopg.connect(ts_db.url, autocommit=True) as conn:
        p = {"job": job, "h": hour}
        conn.execute("""INSERT INTO steps (job, rank, step, start_ts, end_ts, duration_s)
                        SELECT %(job)s, r, s, %(h)s + s * INTERVAL '2 s',
                               %(h)s + s * INTERVAL '2 s' + INTERVAL '1.9 s', 1.9
                        FROM generate_series(0, 63) r, generate_series(0, 149) s""", p)
        conn.execute("""INSERT INTO collectives (job, rank, step, seq, op, bytes, start_ts, end_ts, duration_s)
                        SELECT %(job)s, r, s, k, 'all_reduce', 1 << 24,
                               %(h)s + s * INTERVAL '2 s' + k * INTERVAL '0.3 s',
                               %(h)s + s * INTERVAL '2 s' + k * INTERVAL '0.3 s' + INTERVAL '0.2 s', 0.2
                        FROM generate_series(0, 63) r, generate_series(0, 149) s, generate_series(0, 3) k""", p)
        chunks = [r[0] for r in conn.execute(
            """SELECT format('%%I.%%I', chunk_schema, chunk_name)::regclass::oid FROM timescaledb_information.chunks
               WHERE hypertable_name IN ('steps', 'collectives') AND range_start <= %(h)s AND range_end > %(h)s""", p)]
        assert len(chunks) == 2
        conn.execute("DELETE FROM pg_statistic WHERE starelid = ANY(%s)", (chunks,))
        conn.execute("UPDATE pg_class SET reltuples = -1, relpages = 0 WHERE oid = ANY(%s)", (chunks,))
        with conn.transaction():
            conn.execute("SET LOCAL statement_timeout = '20s'")  # the fixed plan takes well under a second
            roll_hour(conn, job=job, hour=hour)
        row = conn.execute("SELECT steps, rank_steps, comm_s FROM step_rollup WHERE job = %s", (job,)).fetchone()
    assert row is not None and row[:2] == (150, 64 * 150)
    assert row[2] == pytest.approx(64 * 150 * 4 * 0.2)
