"""Collectives from PyTorch's Flight Recorder (``_dump_fr_trace_json``), read by a background thread.

The recorder's C++ ring holds every collective of every process group, whoever issued it: DDP's
bucket all-reduces, ``torch.compile``'s functional collectives, names bound before the hook, and
coalesced ops. A daemon thread dumps it every ``interval`` seconds, turns the entries it has not
seen (by ``record_id``) into collective records and hands them to the sender; the training thread
does nothing per op for them.

What the ring gives and what is sent (docs/training-hook.md, "Which path times collectives"):

- ``seq`` is the entry's ``collective_seq_id`` (the same on every member of the group), the group
  is named as the wrapper names it (``world``, ``desc.name``, or ``rec.name_group``'s alias);
- bytes are this rank's input (sizes x dtype); an unknown dtype leaves ``bytes`` absent, counted;
- time: with NCCL timing (``TORCH_NCCL_ENABLE_TIMING=1``) ``duration_ms`` ends at the watchdog's
  completion time; without it (gloo, CPU) the ring holds the creation time only, so a collective
  the wrapper timed takes the wrapper's clock (joined by thread, group and issue window), and one
  it did not see (DDP, compiled, pre-bound) runs from creation to the first dump that found it
  retired: an upper bound, at most one interval late;
- step: the step whose wall-clock bounds hold the creation time;
- point-to-point entries are left to the wrapper, which numbers them per peer.

A gap in ``record_id`` means the ring wrapped between two dumps: the entries lost are counted in
``stats["flight_missed"]``. An unknown ``version`` is logged once and the reader stops; the wrapper
then records everything as before.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger("fabricscope.training")

SUPPORTED_MAJOR = "2"  # entries' field names used here are those of the 2.x dump format
DEFAULT_BUFFER = "512"  # TORCH_FR_BUFFER_SIZE when unset: a read costs per entry held, not per new one
_HOLD_POLLS = 3  # dumps an entry waits for its wrapper timing (an async op's end) before going alone
_JOIN_TOL_S = 0.0002  # the ring's wall clock against the hook's (both time.time(), re-anchored per step)

# profiling_name after the backend prefix -> op as posted (the wrapper's names)
OPS: dict[str, str] = {
    "all_reduce": "all_reduce", "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "all_reduce_coalesced": "all_reduce", "allreduce_sparse": "all_reduce",
    "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "all_gather": "all_gather", "allgather": "all_gather", "allgather_coalesced": "all_gather",
    "_allgather_base": "all_gather_into_tensor", "all_gather_into_tensor": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor",
    "all_gather_into_tensor_coalesced": "all_gather_into_tensor",
    "reduce_scatter": "reduce_scatter", "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor": "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor",
    "reduce_scatter_coalesced": "reduce_scatter",
    "all_to_all": "all_to_all", "alltoall": "all_to_all", "alltoall_base": "all_to_all_single",
    "all_to_all_single": "all_to_all_single", "gather": "gather", "scatter": "scatter",
    "coalesced": "coalesced",
}
DTYPE_BYTES: dict[str, int] = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1,
    "Bool": 1, "ComplexDouble": 16, "ComplexFloat": 8, "ComplexHalf": 4, "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1,
}


def supported(version: Any) -> bool:
    return isinstance(version, str) and version.split(".")[0] == SUPPORTED_MAJOR


def op_name(profiling_name: Any) -> tuple[str, bool]:
    """(op as posted, known): ``nccl:all_reduce`` -> ``all_reduce``; unknown names pass through."""
    name = str(profiling_name or "").rsplit(":", 1)[-1]
    op = OPS.get(name)
    return (op, True) if op is not None else (name or "unknown", False)


def family(op: str) -> str:
    """``all_gather_into_tensor`` and ``all_gather`` are one family: gloo lists the one as the other."""
    for suffix in ("_into_tensor", "_tensor", "_single"):
        op = op.removesuffix(suffix)
    return op


def input_bytes(sizes: Any, dtypes: Any) -> int | None:
    """Bytes of the entry's inputs; None (absent, not guessed) when a dtype is unknown."""
    if not isinstance(sizes, list) or not isinstance(dtypes, list) or len(sizes) != len(dtypes):
        return None
    total = 0
    for shape, dt in zip(sizes, dtypes, strict=True):
        width = DTYPE_BYTES.get(str(dt))
        if width is None or not isinstance(shape, list):
            return None
        n = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                return None
            n *= d
        total += n * width
    return total


def group_name(name: str, desc: str) -> str:
    """The wrapper's naming: the default group is ``world``; others ``desc.name`` or ``name``."""
    if desc == "default_pg":
        return "world"
    return f"{desc}.{name}" if desc and desc != "undefined" else name or "unknown"


def times(entry: dict[str, Any], seen_at: float) -> tuple[float, float] | None:
    """(start, end) wall seconds of an entry with no wrapper timing; None without a creation time."""
    created = _ns(entry.get("time_created_ns"))
    if created is None:
        return None
    started = _ns(entry.get("time_discovered_started_ns")) or created
    completed = _ns(entry.get("time_discovered_completed_ns"))
    dur = entry.get("duration_ms")
    if isinstance(dur, (int, float)) and not isinstance(dur, bool) and math.isfinite(dur) and dur >= 0:
        end = completed if completed is not None and completed >= created else max(started, created) + dur / 1e3
        return max(created, end - dur / 1e3), end
    end = completed if completed is not None else seen_at
    return started, max(end, started)


def _ns(v: Any) -> float | None:
    return v / 1e9 if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 2**63 else None  # int64 ns


class FlightReader:
    """Polls the ring, joins wrapper timings, posts records. Never raises into the caller."""

    def __init__(self, dump: Callable[[], Any], emit: Callable[[dict[str, Any]], None], *,
                 rank: Callable[[], int], step_of: Callable[[float], int | None],
                 alias: Callable[[str], str | None], sizes: Callable[[], dict[str, int]],
                 interval_s: float = 0.5) -> None:
        self._dump, self._emit, self._rank, self._step_of = dump, emit, rank, step_of
        self._alias, self._sizes = alias, sizes
        self.interval_s = min(max(interval_s, 0.01), 10.0)  # the longest wait between reads
        self.wait_s = self.interval_s
        self.last_id = -1
        self.missed = 0
        self.recorded = 0
        self.unmapped = 0
        self.errors = 0
        self.disabled = False
        # wrapper timings: [pg name, thread id, t0 wall, t1 wall, end wall or None, op], appended by the
        # training thread (deque.append is atomic), consumed here
        self.timings: deque[list[Any]] = deque(maxlen=100_000)
        self._ring_len = 0
        self._snap: list[list[Any]] = []
        self._held: dict[int, tuple[dict[str, Any], int]] = {}  # record_id -> (entry, polls held)
        self._group_sizes: dict[str, int] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Skip what the ring held before the hook (issued before it existed), then poll."""
        try:
            doc = json.loads(self._dump())
            ids = [e["record_id"] for e in doc.get("entries") or [] if isinstance(e.get("record_id"), int)]
            self.last_id = max(ids, default=-1)
        except Exception:
            self.errors += 1
        self._thread = threading.Thread(target=self._loop, name="fabricscope-flight", daemon=True)
        self._thread.start()

    def stop(self, final: bool = True) -> None:
        self._stop.set()
        if final:
            self.poll(final=True)

    def _loop(self) -> None:
        # A read costs the whole ring (torch has no "since record_id"): read as seldom as the ring
        # allows. When a read found the ring over half new, wait half as long; under a quarter, longer.
        while not self._stop.wait(self.wait_s):
            before = self.last_id
            self.poll()
            held = max(self._ring_len, 1)
            new = self.last_id - before
            if new * 2 > held:
                self.wait_s = max(self.wait_s / 2, 0.01)
            elif new * 4 < held:
                self.wait_s = min(self.wait_s * 1.5, self.interval_s)

    def poll(self, final: bool = False) -> int:
        """Read the ring once; returns the records posted. Thread-safe, never raises."""
        if self.disabled:
            return 0
        with self._lock:
            try:
                raw = self._dump()
                doc = json.loads(raw)
                return self._take(doc, time.time(), final)
            except Exception as e:
                self.errors += 1
                if "dump" not in self._warned:
                    self._warned.add("dump")
                    log.warning("fabricscope: flight recorder dump unreadable: %s", e)
                return 0

    def _take(self, doc: dict[str, Any], now: float, final: bool) -> int:
        version = doc.get("version")
        if not supported(version):
            self.disabled = True
            log.warning("fabricscope: flight recorder format version %r not known; collectives are timed by "
                        "the torch.distributed wrapper instead", version)
            return 0
        entries = sorted((e for e in doc.get("entries") or [] if isinstance(e.get("record_id"), int)),
                         key=lambda e: e["record_id"])
        by_id = {e["record_id"]: e for e in entries}
        self._ring_len = len(entries)
        for rid in list(self._held):  # held entries may have completed, or fallen out of the ring
            if rid in by_id:
                self._held[rid] = (by_id[rid], self._held[rid][1])
            else:
                del self._held[rid]
                self.missed += 1
        new = [e for e in entries if e["record_id"] > self.last_id]
        if new:
            if self.last_id >= 0 and new[0]["record_id"] > self.last_id + 1:
                self.missed += new[0]["record_id"] - self.last_id - 1  # the ring wrapped between dumps
            self.last_id = new[-1]["record_id"]
            for e in new:
                if not e.get("is_p2p"):  # point-to-point: the wrapper's, numbered per peer
                    self._held[e["record_id"]] = (e, 0)
        posted = 0
        # the training thread appends while this runs: iterate a copy (list() of a deque is atomic)
        self._snap = list(self.timings)
        for rid in sorted(self._held):
            e, polls = self._held[rid]
            slot = self._join(e)
            done = e.get("retired") or e.get("state") == "completed" or e.get("duration_ms") is not None
            if not done and (slot is None or slot[4] is None):
                continue  # still in flight (gloo marks an entry retired some time after the wrapper saw it end)
            if slot is not None and slot[4] is None and polls < _HOLD_POLLS and not final:
                self._held[rid] = (e, polls + 1)  # an async op whose end the wrapper has not seen yet
                continue
            timed = None
            if slot is not None:
                self.timings.remove(slot)
                self._snap.remove(slot)
                timed = (slot[2], slot[4], slot[5])
            rec = self._record(e, now, timed)
            del self._held[rid]
            if rec is not None:
                self._emit(rec)
                posted += 1
        newest = _ns(entries[-1].get("time_created_ns")) if entries else None
        while newest is not None and self.timings and (self.timings[0][3] or math.inf) < newest - 60.0:
            self.timings.popleft()  # a wrapped call the ring never listed
        self.recorded += posted
        return posted

    def _join(self, e: dict[str, Any]) -> list[Any] | None:
        """The wrapper's timing slot for this entry: same thread and group, created within the call."""
        created = _ns(e.get("time_created_ns"))
        pg = e.get("process_group") or ["", ""]
        if created is None or not self._snap:
            return None
        raw, tid = str(pg[0]), str(e.get("thread_id", ""))
        fam = family(op_name(e.get("profiling_name"))[0])  # DDP issues its own ops inside a wrapped call
        for slot in self._snap:  # in issue order: stop at the first call issued after this entry
            if slot[2] - _JOIN_TOL_S > created:
                break
            t1 = slot[3] if slot[3] is not None else math.inf  # None: the call has not returned yet
            if slot[0] == raw and slot[1] == tid and created <= t1 + _JOIN_TOL_S and family(slot[5]) == fam:
                return slot
        return None

    def _record(self, e: dict[str, Any], now: float, timed: tuple[float, float | None, str] | None
                ) -> dict[str, Any] | None:
        if timed is not None and timed[1] is not None:
            start, end = timed[0], max(timed[0], timed[1])
        else:
            t = times(e, now)
            if t is None:
                self.errors += 1
                return None
            start, end = t
        op, known = op_name(e.get("profiling_name"))
        if timed is not None:  # the function the script called: gloo lists all_gather_into_tensor as all_gather
            op, known = timed[2], True
        if not known:
            self.unmapped += 1
            if op not in self._warned:
                self._warned.add(op)
                log.warning("fabricscope: flight recorder op %r not in the op table; posted under that name", op)
        pg = e.get("process_group") or ["", ""]
        raw = str(pg[0]) if pg else ""
        rec: dict[str, Any] = {"rank": self._rank(), "op": op, "start": start, "end": end}
        seq = e.get("collective_seq_id")
        if isinstance(seq, int) and seq >= 0:
            rec["seq"] = seq
        nb = input_bytes(e.get("input_sizes"), e.get("input_dtypes"))
        if nb is not None:
            rec["bytes"] = nb
        rec["group"] = self._alias(raw) or group_name(raw, str(pg[1]) if len(pg) > 1 else "")
        size = self._group_sizes.get(raw)
        if size is None:
            self._group_sizes = self._sizes()
            size = self._group_sizes.get(raw)
        if size is not None:
            rec["group_size"] = size
        created = _ns(e.get("time_created_ns"))
        step = self._step_of(created) if created is not None else None
        if step is not None:
            rec["step"] = step
        return rec
