from __future__ import annotations

from pathlib import Path

import pytest

from fabricscope.collectors.sinks.spool import Spool, SpoolLocked


def rec(i: int, pad: int = 0) -> dict[str, object]:
    return {"batch_id": f"b{i}", "kind": "samples", "items": [{"v": i, "pad": "x" * pad}]}


def drain(sp: Spool) -> list[object]:
    out = []
    while (r := sp.peek()) is not None:
        out.append(r["batch_id"])
        sp.pop()
    return out


def test_fifo_and_offset_survive_reopen(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    sp = Spool(p)
    for i in range(5):
        assert sp.append(rec(i))
    assert sp.peek()["batch_id"] == "b0"  # type: ignore[index]
    sp.pop()
    assert sp.peek()["batch_id"] == "b1"  # type: ignore[index]
    sp.pop()
    sp.close()
    sp = Spool(p)  # a new process picks up where the last stopped
    assert drain(sp) == ["b2", "b3", "b4"]
    assert not sp and p.stat().st_size == 0
    sp.close()


def test_bound_is_respected_and_compaction_makes_room(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    sp = Spool(p, max_bytes=1000)
    n = 0
    while sp.append(rec(n, pad=100)):
        n += 1
    assert 0 < n < 10 and p.stat().st_size <= 1000
    sp.peek()
    sp.pop()  # one replayed: its room can be reclaimed by the next append
    assert sp.append(rec(99, pad=100))
    assert p.stat().st_size <= 1000
    assert drain(sp) == [f"b{i}" for i in range(1, n)] + ["b99"]
    sp.close()


def test_torn_and_corrupt_lines_are_skipped_not_fatal(tmp_path: Path) -> None:
    p = tmp_path / "s.jsonl"
    sp = Spool(p)
    sp.append(rec(0))
    sp.close()
    with open(p, "ab") as f:
        f.write(b'{"batch_id": "torn", "ki')  # a crash mid-write
    sp = Spool(p)
    sp.append(rec(1))
    assert drain(sp) == ["b0", "b1"]
    assert sp.corrupt == 1
    sp.close()


def test_one_process_per_spool(tmp_path: Path) -> None:
    sp = Spool(tmp_path / "s.jsonl")
    with pytest.raises(SpoolLocked):
        Spool(tmp_path / "s.jsonl")
    sp.close()
    Spool(tmp_path / "s.jsonl").close()
