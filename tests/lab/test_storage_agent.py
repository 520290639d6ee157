"""The lab storage system's collector: one block device's diskstats under the volume's declared source."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.storage_agent import collector

# /proc/diskstats rows (Linux 5.5+: 20 columns): the volume's loop device, the disk under it, a disk
# of the machine. Reads, read time (ms), writes, write time, in flight, io time, weighted io time.
ROW = "   7       {minor} {name} {r} 0 {sr} {rms} {w} 0 {sw} {wms} 0 {io} {wio} 0 0 0 0 0 0\n"


def _write(proc: Path, vol: dict[str, int], other: dict[str, int]) -> None:
    (proc / "diskstats").write_text(ROW.format(minor=5, name="loop5", **vol) + ROW.format(minor=4, name="loop4",
                                    **other) + "   8       0 sda 9 0 9 9 9 0 9 9 0 9 9 0 0 0 0 0 0\n")


def test_the_volume_is_reported_under_its_declared_source_with_its_read_latency(tmp_path: Path) -> None:
    c = collector("nas1:share0", "loop5", proc_root=tmp_path)
    _write(tmp_path, dict(r=100, sr=800, rms=50, w=4, sw=32, wms=8, io=60, wio=60),
           dict(r=7, sr=56, rms=1, w=0, sw=0, wms=0, io=1, wio=1))
    first = c.poll()
    assert {s.source for s in first} == {"nas1:share0"}  # only the named disk, under the volume's name
    assert not [s for s in first if s.metric == "read_latency_seconds"]  # one poll: no interval yet
    # 40 reads more, taking 2,480 ms more: 62 ms each (what a throttled disk under the volume gave)
    _write(tmp_path, dict(r=140, sr=800 + 40 * 512, rms=50 + 2480, w=4, sw=32, wms=8, io=2540, wio=2540),
           dict(r=9, sr=72, rms=2, w=0, sw=0, wms=0, io=2, wio=2))
    got = {s.metric: s.value for s in c.poll()}
    assert got["read_latency_seconds"] == pytest.approx(0.062)
    assert got["read_ops_total"] == 140 and got["read_bytes_total"] == (800 + 40 * 512) * 512
    assert "write_latency_seconds" not in got  # no writes in the interval: absent, never 0 or -1
