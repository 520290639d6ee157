"""A rolled-back batch must not leave the writer caching series ids that do not exist."""

from __future__ import annotations

import time
import uuid

import numpy as np
import psycopg
import pytest

from fabricscope.service.db.writer import SampleWriter
from fabricscope.service.ingest.validate import SampleColumns


def _cols(source: str, values: list[float], t0: float) -> SampleColumns:
    n = len(values)
    return SampleColumns(np.array([t0 + i for i in range(n)], dtype=float), [source] * n,
                         ["rx_bytes_total"] * n, np.array(values, dtype=float), [""] * n, None)


def test_rolled_back_series_are_not_cached(database_url: str) -> None:
    writer = SampleWriter()
    src = f"rb{uuid.uuid4().hex[:8]}:eth0"
    t0 = time.time() - 100
    with psycopg.connect(database_url) as conn:
        with pytest.raises(RuntimeError), conn.transaction():
            writer.write_samples(conn, _cols(src, [1, 2, 3], t0))
            raise RuntimeError("commit never happens (database restart, dropped connection)")
        with conn.transaction():
            written = writer.write_samples(conn, _cols(src, [10, 20, 30], t0 + 10))
        writer.committed(written)
        rows = conn.execute("SELECT value, rate FROM sample_view WHERE source = %s ORDER BY ts", (src,)).fetchall()
        orphans = conn.execute("SELECT count(*) FROM samples s LEFT JOIN series se ON se.id = s.series_id"
                               " WHERE se.id IS NULL").fetchone()
    assert [r[0] for r in rows] == [10.0, 20.0, 30.0]
    assert [r[1] for r in rows] == [None, 10.0, 10.0]
    assert orphans == (0,)
