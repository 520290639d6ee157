"""The database transport (make_sink("postgresql://...")) writes through the ingest code to the real
database, spools while it is down, replays."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psycopg

from fabricscope.collectors.sinks.factory import make_sink
from tests.support import TestDatabase


def test_db_sink_writes_samples_steps_and_job(database_url: str, db_conn: psycopg.Connection) -> None:
    src = f"dbsink{uuid.uuid4().hex[:6]}:eth0"
    job = f"job-{uuid.uuid4().hex[:6]}"
    sink = make_sink(database_url, flush_interval_s=0.1)
    t = time.time() - 10
    for i in range(5):
        assert sink.submit("samples", {"ts": t + i, "source": src, "metric": "rx_bytes_total", "value": 100 * i})
    sink.put_job(job, {"ranks": [{"rank": 0, "host": "n1", "nic": "eth0"}]})
    sink.submit("steps", {"rank": 0, "step": 1, "start": t, "end": t + 1}, job=job)
    assert sink.flush(10)
    sink.close()
    rates = [r[0] for r in db_conn.execute("SELECT rate FROM sample_view WHERE source=%s ORDER BY ts", (src,))]
    assert rates == [None, 100.0, 100.0, 100.0, 100.0]
    assert db_conn.execute("SELECT nic FROM job_ranks WHERE job=%s", (job,)).fetchone() == ("eth0",)
    assert db_conn.execute("SELECT count(*) FROM steps WHERE job=%s", (job,)).fetchone() == (1,)
    assert "password" not in repr(sink)


def test_db_sink_spools_during_outage_and_replays(tmp_path: Path) -> None:
    db = TestDatabase.create(None, tmp_path)
    try:
        assert db.embedded is not None
        sink = make_sink(db.url, spool_path=tmp_path / "spool", flush_interval_s=0.1, max_retries=0, timeout_s=1)
        t = time.time() - 100
        sink.submit("samples", {"ts": t, "source": "h:eth0", "metric": "rx_bytes_total", "value": 0})
        assert sink.flush(10)
        db.embedded.stop()
        for i in range(1, 50):
            sink.submit("samples", {"ts": t + i, "source": "h:eth0", "metric": "rx_bytes_total", "value": 10 * i})
        assert not sink.flush(3)
        assert sink.stats["spooled"] > 0 and sink.stats["dropped"] == 0
        db.embedded.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not sink.flush(2):
            pass
        sink.close()
        with psycopg.connect(db.url) as conn:
            rows = conn.execute("SELECT value, rate FROM sample_view WHERE source='h:eth0' ORDER BY ts").fetchall()
        assert [r[0] for r in rows] == [10.0 * i for i in range(50)]
        assert all(r[1] == 10.0 for r in rows[1:])
    finally:
        db.drop()
