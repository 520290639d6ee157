"""Issue #46 item 7: the spool records only what is durably written, and a bad record at its head
is skipped with a log line, never jams delivery.

The disk fills for real: a child process appends under a file size limit (RLIMIT_FSIZE, so the
kernel refuses the write part way, as on a full disk), then the limit is lifted and it goes on.
Delivery runs through the real HttpSender into a real `fabricscope serve`."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from fabricscope.collectors.sinks.http import HttpSender
from tests.bus import rows

CHILD = textwrap.dedent("""
    import json, resource, signal, sys
    from fabricscope.collectors.sinks.spool import Spool
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal, like ENOSPC
    sp = Spool(sys.argv[1])
    def rec(i):
        return {"batch_id": f"b{i}", "kind": "samples", "items": [{"v": i, "pad": "x" * 3000}]}
    ok, n = [], 0
    for i in range(10):  # recorded before the disk fills
        ok += [i] if sp.append(rec(i)) else []
    resource.setrlimit(resource.RLIMIT_FSIZE, (sp.pending_bytes + 4500, resource.RLIM_INFINITY))
    failed = 0
    for i in range(10, 20):  # the first fits, the second is cut part way, the rest find no room
        try:
            ok += [i] if sp.append(rec(i)) else []
        except OSError:
            failed += 1
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    for i in range(20, 25):  # room again
        ok += [i] if sp.append(rec(i)) else []
    replayed = []
    while (r := sp.peek()) is not None:
        replayed.append(int(r["batch_id"][1:]))
        sp.pop()
    print(json.dumps({"ok": ok, "failed": failed, "replayed": replayed, "corrupt": sp.corrupt}))
""")


def test_every_append_that_returned_ok_is_replayed_after_a_full_disk(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "s.jsonl")], capture_output=True,
                         text=True, timeout=60, check=True)
    got = json.loads(out.stdout)
    assert got["failed"] == 9, got  # the limit was really met
    assert got["ok"] == [*range(11), *range(20, 25)], got
    assert got["replayed"] == got["ok"] and got["corrupt"] == 0, got


BAD_HEADS = [b'{"hello": "world"}\n', b'[1, 2, 3]\n', b'{"batch_id": "x", "kind": "job"}\n',
             b'{"batch_id": "y", "kind": "samples", "items": {"not": "a list"}}\n']


def test_records_that_are_not_batches_are_skipped_not_jamming(
        service_url: str, database_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Valid JSON of another shape at the head: before, every cycle raised on it ("unexpected
    error") and nothing behind it, nor anything new, was ever sent."""
    spool = tmp_path / "agent.spool"
    spooled = rows.sample_items(7, prefix="sp46h")
    spool.write_bytes(b"".join(BAD_HEADS) + json.dumps({"batch_id": "b-old", "kind": "samples", "job": None,
                                         "items": spooled}).encode() + b"\n")
    caplog.set_level(logging.WARNING, logger="fabricscope")
    sender = HttpSender(service_url, spool_path=spool, flush_interval_s=60, timeout_s=10)
    fresh = rows.sample_items(299, prefix="sp46n")
    for it in fresh:
        assert sender.submit("samples", it)
    assert sender.flush(30), sender.stats
    sender.close()
    with psycopg.connect(database_url) as conn:
        assert rows.count(conn, "sp46n") == 299 and rows.count(conn, "sp46h") == 7
    assert sender.stats["replayed"] == 7 and sender.stats["spool_corrupt"] == 4, sender.stats
    skipped = [r.getMessage() for r in caplog.records if "skipping the record at byte" in r.getMessage()]
    assert len(skipped) == 4, caplog.text  # one line each
    assert "unexpected error" not in caplog.text
