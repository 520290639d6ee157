"""CUDA timing events are pooled (#45 item 2): a resolved pair is recorded again instead of two new
events per collective. No GPU here: the events are stand-ins with CUDA's Event methods (query,
record, elapsed_time); the pooling logic under test is the hook's own."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fabricscope.collectors.training.collectives import CollectiveTimer


class Event:
    made = 0

    def __init__(self, enable_timing: bool = False) -> None:
        Event.made += 1
        self.t, self.recorded = 0.0, 0

    def record(self) -> None:
        self.recorded += 1

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Event) -> float:
        return 1.5


class Rec:
    collectives_on = cuda_on = True
    wall_offset = 0.0

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def _submit(self, kind: str, item: dict[str, Any]) -> None:
        self.sent.append(item)

    def _count_drop(self, n: int) -> None:
        raise AssertionError("nothing is dropped here")


def test_resolved_events_are_reused() -> None:
    rec = Rec()
    timer = CollectiveTimer(rec)  # type: ignore[arg-type]
    timer.torch = SimpleNamespace(cuda=SimpleNamespace(Event=Event))
    timer._resolver = object()  # type: ignore[assignment]  # resolved by hand below, no thread
    Event.made = 0
    for i in range(100):
        start = timer._cuda_start((SimpleNamespace(is_cuda=True),), {}, [(0, "tensor")])
        timer._cuda_end(start, {"op": "all_reduce", "seq": i, "_issued": 0.0})
        assert timer.resolve() == 1
    assert Event.made == 2 and timer.events_created == 2  # one pair, recorded 100 times each
    assert [m["seq"] for m in rec.sent] == list(range(100))
    assert all(abs(m["end"] - m["start"] - 0.0015) < 1e-12 for m in rec.sent)
