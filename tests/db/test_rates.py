"""Counter wraps (32/64-bit) and resets never yield negative or huge rates — pure and via the API."""

from __future__ import annotations

import time
import uuid

import httpx
import numpy as np
import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabricscope.core.rates import counter_rates

MAX_RATE = 5e10  # 400 Gb/s in bytes/s is 5e10: the fastest honest counter we expect


@st.composite
def counter_stream(draw: st.DrawFn) -> tuple[list[float], list[float], list[bool], list[bool], int]:
    bits = draw(st.sampled_from([32, 64]))
    mod = 2**bits
    n = draw(st.integers(2, 40))
    value = draw(st.one_of(st.integers(0, mod - 1), st.integers(max(0, mod - 10**12), mod - 1),
                           st.integers(2**32 - 10**6, 2**32 + 10**6).map(lambda x: x % mod)))
    t = 1.7e9
    ts, vals, resets, marked = [t], [float(value)], [False], [False]
    for _ in range(n - 1):
        dt = draw(st.floats(0.5, 30))
        t += dt
        if draw(st.integers(0, 9)) == 0:  # a reset: driver reload, counter clear, reboot
            new = draw(st.integers(0, 10_000))
            explicit = draw(st.booleans())
            # Unmarked resets are only recognisable as such when they cannot pass for a wrap.
            if not explicit and (bits == 64 or value - new <= 2**31) and new < value:
                value = new
                resets.append(True)
                marked.append(False)
            else:
                value = new
                resets.append(True)
                marked.append(True)
        else:
            limit = min(int(MAX_RATE * dt), 2**31 - 1) if bits == 32 else int(MAX_RATE * dt)
            value = (value + draw(st.integers(0, limit))) % mod
            resets.append(False)
            marked.append(False)
        ts.append(t)
        vals.append(float(value))
    return ts, vals, resets, marked, bits


def _check(rates: np.ndarray, ts: list[float], vals: list[float], resets: list[bool], bits: int) -> None:
    for i in range(1, len(ts)):
        r = rates[i]
        if np.isnan(r):
            continue
        assert r >= 0, f"negative rate {r} at {i}"
        if resets[i]:  # an unmarked reset that passes for a wrap may only imply a bounded rate
            assert r <= max(2**31 / (ts[i] - ts[i - 1]), 1e12) + 1
        if not resets[i]:
            true = ((vals[i] - vals[i - 1]) % 2**bits) / (ts[i] - ts[i - 1])
            tol = 1e-6 * true + (5e3 if bits == 64 else 1e-3)  # float64 spacing near 2**64 is 4096
            assert abs(r - true) <= tol, (r, true)
        assert r <= MAX_RATE * 1.001 or resets[i]


@settings(max_examples=1500, deadline=None)
@given(counter_stream())
def test_pure_rates_never_negative_or_huge(stream: tuple) -> None:  # type: ignore[type-arg]
    ts, vals, resets, marked, bits = stream
    t = np.array(ts)
    v = np.array(vals)
    disc = np.array(marked[1:])
    rates = np.concatenate([[np.nan], counter_rates(t[:-1], v[:-1], t[1:], v[1:], disc)])
    _check(rates, ts, vals, resets, bits)
    for i in range(1, len(ts)):
        if marked[i]:
            assert np.isnan(rates[i]), "an explicit discontinuity must give no rate"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(counter_stream())
def test_server_rates_never_negative_or_huge(api: httpx.Client, db_conn: psycopg.Connection,
                                             stream: tuple) -> None:  # type: ignore[type-arg]
    ts, vals, resets, marked, bits = stream
    src = f"wrap{uuid.uuid4().hex[:8]}:Ethernet1"
    shift = time.time() - 3600 - ts[0]
    samples = [{"ts": t + shift, "source": src, "metric": "rx_bytes_total", "value": int(v),
                **({"discontinuity": True} if m else {})} for t, v, m in zip(ts, vals, marked, strict=True)]
    # Split in two batches so rates continue across batches through the writer's cache.
    half = len(samples) // 2
    for part in (samples[:half], samples[half:]):
        if part:
            assert api.post("/v1/ingest/samples", json={"samples": part}).status_code == 200
    got = db_conn.execute("SELECT rate FROM sample_view WHERE source = %s ORDER BY ts", (src,)).fetchall()
    rates = np.array([np.nan if r[0] is None else r[0] for r in got])
    assert len(rates) == len(ts)
    _check(rates, ts, vals, resets, bits)
