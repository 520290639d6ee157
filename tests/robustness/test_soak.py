"""The 60-second form of bench/soak.py (#18): mixed ingest, readers and idle/slow sockets against
`fabricscope serve` on its embedded PostgreSQL, with the database restarted halfway."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO


@pytest.mark.slow
def test_soak_60s_no_5xx_outside_restart_nothing_lost(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    cmd = [sys.executable, str(REPO / "bench" / "soak.py"), "--duration", "60", "--json", str(out),
           "--p99-ms", "2000", "--rss-mb", "500"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        text, _ = proc.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the bench stops its service and database on SIGTERM
        text, _ = proc.communicate(timeout=90)
        pytest.fail(f"soak did not finish in 360 s:\n{text[-3000:]}")
    assert out.exists(), text[-3000:]
    r = json.loads(out.read_text())
    # The load and the restart really happened.
    assert r["outage_s"] >= 3, text
    assert r["ingest"]["requests"] > 500 and r["read"]["requests"] > 500, text
    assert sum(c["stored"]["samples"] for c in r["checksums"]) > 50_000, text
    # The four requirements.
    assert r["ingest"]["5xx_outside_window"] == 0 and r["read"]["5xx_outside_window"] == 0, text
    assert r["flushed"] and all(c["equal"] and c["sender"]["dropped"] == 0 for c in r["checksums"]), text
    assert r["ingest"]["p99_ms"] <= 2000, text
    assert r["rss_mb"]["ceiling"] <= 500, text
    assert proc.returncode == 0, text
