"""The wrapper's CUDA path at native cost (#45 item 2): pooled timing events, one tuple per op, resolved
per stream in issue order.

No GPU here (CPU-only torch): ``Stream`` and ``Event`` below are the stand-in for the CUDA hardware
that cannot run here. They implement the subset of ``torch.cuda.Event``'s API the hook uses
(``record(stream)``, ``query()``, ``elapsed_time(other)``, ``synchronize()``) with CUDA's rules: work
recorded on one stream completes in the order it was recorded; ``elapsed_time`` raises unless both
events have completed; an event can be recorded again. The test moves each stream's completion
point (``Stream.finish``) where a GPU would. Everything else is the hook's own code: the real
wrapper around a collective function, the real ``Recorder``'s record building.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pytest

from fabricscope.collectors.training import Recorder
from fabricscope.collectors.training.collectives import CollectiveTimer


class Stream:
    """A CUDA stream: a GPU clock (ms) and how far its recorded work has completed."""

    def __init__(self, device_index: int = 0) -> None:
        self.device_index = device_index
        self.gpu_ms = 0.0
        self.recorded = 0  # marks recorded so far
        self.completed = 0  # marks completed (in order)

    def finish(self, upto: int | None = None) -> None:
        self.completed = self.recorded if upto is None else upto


class Event:
    made = 0
    queries = 0

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        Event.made += 1
        self.stream: Stream | None = None
        self.mark = 0
        self.ms = 0.0

    def record(self, stream: Stream | None = None) -> None:
        s = stream if stream is not None else CUDA.current_stream()
        s.recorded += 1
        self.stream, self.mark, self.ms = s, s.recorded, s.gpu_ms

    def query(self) -> bool:
        Event.queries += 1
        return self._done()

    def _done(self) -> bool:
        return self.stream is not None and self.stream.completed >= self.mark

    def synchronize(self) -> None:
        assert self.stream is not None
        self.stream.completed = max(self.stream.completed, self.mark)

    def elapsed_time(self, other: Event) -> float:
        if not (self._done() and other._done()):
            raise RuntimeError("Both events must be completed before calculating elapsed time.")
        return other.ms - self.ms


class _Cuda:
    Event = Event

    def __init__(self) -> None:
        self.stream = Stream()

    def current_stream(self) -> Stream:
        return self.stream


CUDA = _Cuda()


class Tensor:
    is_cuda = True

    def numel(self) -> int:
        return 4

    def element_size(self) -> int:
        return 4


class Work:
    def __init__(self, stream: Stream, ms: float) -> None:
        self.stream, self.ms = stream, ms

    def wait(self) -> bool:
        self.stream.gpu_ms += self.ms  # the current stream now waits for the collective
        return True

    def is_completed(self) -> bool:
        return True


def all_reduce(tensor: Any, op: Any = None, group: Any = None, async_op: bool = False, ms: float = 1.5) -> Any:
    """The collective: ``ms`` of GPU time on the current stream (async: once waited for)."""
    s = CUDA.current_stream()
    if async_op:
        return Work(s, ms)
    s.gpu_ms += ms
    return None


class Group:
    group_name = "0"

    def size(self) -> int:
        return 2


@pytest.fixture
def hook(monkeypatch: pytest.MonkeyPatch) -> tuple[Recorder, CollectiveTimer, Any, list[dict[str, Any]]]:
    global CUDA
    CUDA = _Cuda()
    Event.made = Event.queries = 0
    rec = Recorder("http://127.0.0.1:9", "unit", rank=0, env={}, collectives=False)
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(rec, "_submit", lambda kind, item: sent.append(item))
    rec.collectives_on = rec.cuda_on = True
    timer = CollectiveTimer(rec)
    rec._timer_obj = timer
    timer.torch = SimpleNamespace(cuda=CUDA)
    timer.dist = SimpleNamespace(group=SimpleNamespace(WORLD=Group()))
    timer._resolver = object()  # type: ignore[assignment]  # resolved by hand below, no thread
    wrapped = timer._wrap("all_reduce", "all_reduce", all_reduce, ("tensor",))
    return rec, timer, wrapped, sent


def issue(wrapped: Any, n: int, stream: Stream | None = None, **kw: Any) -> None:
    if stream is not None:
        CUDA.stream = stream
    for _ in range(n):
        wrapped(Tensor(), **kw)


def test_events_are_pooled_per_device_and_not_made_after_warm_up(hook: Any) -> None:
    _rec, timer, wrapped, sent = hook
    issue(wrapped, 3)  # warm-up: three ops in flight at once take three pairs
    CUDA.stream.finish()
    assert timer.resolve() == 3 and Event.made == 6
    for _ in range(50):
        issue(wrapped, 3)
        CUDA.stream.finish()
        assert timer.resolve() == 3
    assert Event.made == 6 and timer.events_created == 6  # each pair recorded again 51 times
    assert [m["seq"] for m in sent] == list(range(1, 154))
    issue(wrapped, 1, Stream(device_index=1))  # another device: its own pool (an event is bound to one)
    assert Event.made == 8 and timer.cuda.pool.made == {0: 3, 1: 1}


def test_a_dry_pool_counts_the_op_and_neither_blocks_nor_allocates(hook: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, timer, wrapped, sent = hook
    monkeypatch.setattr(timer.cuda.pool, "cap", 4)
    issue(wrapped, 10)  # nothing resolves meanwhile: the GPU has not finished any of them
    assert Event.made == 8 and timer.cuda.untimed == 6 and rec.stats["cuda_untimed"] == 6
    CUDA.stream.finish()
    assert timer.resolve() == 4 and [m["seq"] for m in sent] == [1, 2, 3, 4]
    issue(wrapped, 2)  # the pairs are back: timed again, seq numbering never skipped a beat
    CUDA.stream.finish()
    timer.resolve()
    assert [m["seq"] for m in sent][-2:] == [11, 12] and Event.made == 8 and timer.errors == 0


def test_an_op_behind_an_unfinished_one_waits_and_two_streams_resolve_independently(hook: Any) -> None:
    _rec, timer, wrapped, sent = hook
    a, b = CUDA.stream, Stream()
    issue(wrapped, 3, a)  # marks 1..6 on a
    issue(wrapped, 2, b)  # marks 1..4 on b
    a.finish(2)  # a's first op done, its second running
    Event.queries = 0
    assert timer.resolve() == 1
    assert Event.queries == 3  # a: the done one and the first not done; b: its first, not done
    assert [m["seq"] for m in sent] == [1]
    b.finish()  # b's ops done while a's second is still running
    assert timer.resolve() == 2 and [m["seq"] for m in sent] == [1, 4, 5]
    Event.queries = 0
    assert timer.resolve() == 0 and Event.queries == 1  # one query per stream with work pending
    a.finish()
    assert timer.resolve() == 2 and [m["seq"] for m in sent] == [1, 4, 5, 2, 3]


def test_an_unknown_stream_resolves_in_issue_order(hook: Any) -> None:
    _rec, timer, wrapped, sent = hook
    timer.torch = SimpleNamespace(cuda=SimpleNamespace(Event=Event))  # no current_stream: events on the default
    issue(wrapped, 3)
    CUDA.stream.finish(2)
    assert timer.resolve() == 1
    CUDA.stream.finish()
    assert timer.resolve() == 2 and [m["seq"] for m in sent] == [1, 2, 3]


def test_records_have_the_content_of_the_dict_per_op_path(hook: Any) -> None:
    """The fields, start and end that the hook posted when it built a dict per CUDA op: checked
    against the same test on the code before pooling (it passes there too)."""
    rec, timer, wrapped, sent = hook
    rec.wall_offset = 1000.0
    anchor = Event(enable_timing=True)
    anchor.record()
    anchor.synchronize()
    timer._anchor = (anchor, 5000.0)
    rec._step = 7
    CUDA.stream.gpu_ms = 2.0
    issue(wrapped, 1, ms=1.5)  # sync
    work = wrapped(Tensor(), async_op=True, ms=3.0)
    rec._step = 8  # the step at issue is the op's step, even when it is waited for later
    assert work.wait()
    CUDA.stream.finish()
    timer.resolve()
    assert sent == [
        {"rank": 0, "op": "all_reduce", "seq": 1, "bytes": 16, "group": "world", "group_size": 2, "step": 7,
         "start": 5000.0 + 0.002, "end": 5000.0 + 0.002 + 0.0015},
        {"rank": 0, "op": "all_reduce", "seq": 2, "bytes": 16, "group": "world", "group_size": 2, "step": 7,
         "start": 5000.0 + 0.0035, "end": 5000.0 + 0.0035 + 0.003},
    ]
    timer._anchor = None  # no anchor: the CPU issue time stands in for the GPU start
    issue(wrapped, 1, ms=1.0)
    CUDA.stream.finish()
    timer.resolve()
    assert sent[-1]["start"] > 1000.0 and sent[-1]["end"] == pytest.approx(sent[-1]["start"] + 0.001)


def test_the_training_thread_builds_no_dict_per_cuda_op(hook: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, timer, wrapped, _sent = hook
    built: list[str] = []
    real = rec._collective_meta

    def meta(*a: Any) -> dict[str, Any]:
        built.append(inspect.stack()[1].function)
        return real(*a)

    monkeypatch.setattr(rec, "_collective_meta", meta)
    issue(wrapped, 2)
    wrapped(Tensor(), async_op=True).wait()
    assert built == []  # nothing built at the call: the resolver builds them
    CUDA.stream.finish()
    assert timer.resolve() == 3 and built == ["_post"] * 3  # on the resolver's side


def test_an_event_that_fails_is_counted_and_never_reaches_the_loop(hook: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rec, timer, wrapped, sent = hook
    issue(wrapped, 1)
    CUDA.stream.finish()
    timer.resolve()

    def broken(self: Event, stream: Stream | None = None) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with monkeypatch.context() as m:
        m.setattr(Event, "record", broken)
        t = Tensor()
        assert wrapped(t) is None and wrapped(t, async_op=True).wait()  # the collective's results come back
    # counted, not posted (a CPU clock would time only the launch), and the pair is back in the pool
    assert timer.errors == 2 and timer.cuda.pool.made == {0: 1} and len(timer.cuda.pool._free[0]) == 1
    issue(wrapped, 1)
    CUDA.stream.finish()
    assert timer.resolve() == 1 and [m["seq"] for m in sent] == [1, 4]
