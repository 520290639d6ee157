"""The Flight Recorder reader (collectors/training/flight.py) on a real recorded dump (torch 2.13,
gloo) and on edits of it: records, seq, bytes, groups, steps, ring wraps, versions, wrapper joins."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fabricscope.collectors.training import flight

DUMP = json.loads((Path(__file__).resolve().parents[1] / "fixtures/training-flight/gloo-torch2.13.json")
                  .read_text())
T0 = DUMP["entries"][0]["time_created_ns"] / 1e9


def reader(doc: Any, out: list[dict[str, Any]], bounds: list[tuple[int, float, float]] | None = None
           ) -> flight.FlightReader:
    def step_of(t: float) -> int | None:
        return next((n for n, s, e in bounds or [] if s <= t <= e), None)

    box = {"doc": doc}
    fr = flight.FlightReader(lambda: json.dumps(box["doc"]), out.append, rank=lambda: 0, step_of=step_of,
                             alias={"1": "dp0"}.get, sizes=lambda: {"0": 2, "1": 2})
    fr.box = box  # type: ignore[attr-defined]
    return fr


def test_recorded_dump_becomes_records() -> None:
    out: list[dict[str, Any]] = []
    fr = reader(DUMP, out, [(7, T0 - 1, T0 + 0.1)])
    assert fr.poll() == 9 and fr.missed == 0 and fr.unmapped == 0 and fr.errors == 0
    got = [(r["op"], r["seq"], r.get("bytes"), r["group"], r["group_size"]) for r in out]
    assert got == [("all_reduce", 1, 4000, "world", 2), ("all_reduce", 2, 40, "world", 2),
                   ("all_gather", 3, 8, "world", 2), ("broadcast", 4, 48, "world", 2),
                   ("broadcast", 5, 440, "world", 2), ("all_reduce", 6, 440, "world", 2),
                   ("all_reduce", 7, 28, "world", 2),  # all_reduce_coalesced: one entry, both tensors
                   ("all_reduce", 1, 20, "dp0", 2),  # a new group, named by rec.name_group
                   ("barrier", 8, 0, "world", 2)]
    assert out[0]["step"] == 7 and all("step" not in r for r in out[2:])  # created after step 7 ended
    assert all(r["end"] >= r["start"] >= T0 for r in out)
    assert fr.poll() == 0 and len(out) == 9  # nothing twice


def test_ring_wrap_is_counted_and_in_flight_entries_wait() -> None:
    doc = copy.deepcopy(DUMP)
    doc["entries"][-1]["retired"] = False
    out: list[dict[str, Any]] = []
    fr = reader({**doc, "entries": doc["entries"][:3]}, out)
    fr.poll()
    fr.box["doc"] = {**doc, "entries": doc["entries"][6:]}  # type: ignore[attr-defined]
    assert fr.poll() == 2 and fr.missed == 3  # record ids 3, 4, 5 were overwritten between dumps
    doc["entries"][-1]["retired"] = True  # the barrier completes
    assert fr.poll() == 1 and out[-1]["op"] == "barrier"


def test_unknown_version_stops_the_reader() -> None:
    out: list[dict[str, Any]] = []
    fr = reader({**DUMP, "version": "3.0"}, out)
    assert fr.poll() == 0 and fr.disabled and out == []


def test_unknown_op_and_dtype_are_said_not_guessed() -> None:
    doc = copy.deepcopy(DUMP)
    doc["entries"][0]["profiling_name"] = "nccl:fancy_new_op"
    doc["entries"][1]["input_dtypes"] = ["Float4_e2m1"]
    out: list[dict[str, Any]] = []
    fr = reader(doc, out)
    fr.poll()
    assert out[0]["op"] == "fancy_new_op" and fr.unmapped == 1
    assert "bytes" not in out[1]


def test_wrapper_timing_is_joined_and_an_async_end_awaited() -> None:
    e = DUMP["entries"][0]
    c = e["time_created_ns"] / 1e9
    slot = ["0", e["thread_id"], c - 0.001, c + 0.0005, None, "all_reduce"]
    out: list[dict[str, Any]] = []
    fr = reader({**DUMP, "entries": [e]}, out)
    fr.timings.append(slot)
    assert fr.poll() == 0  # the async op's end is not known yet: held
    slot[4] = c + 0.25
    assert fr.poll() == 1 and (out[0]["start"], out[0]["end"]) == (c - 0.001, c + 0.25)
    assert not fr.timings


def test_nccl_timing_gives_duration() -> None:
    e = {"time_created_ns": 10**18, "time_discovered_started_ns": 10**18 + 5 * 10**6,
         "time_discovered_completed_ns": 10**18 + 9 * 10**6, "duration_ms": 2.5}
    start, end = flight.times(e, seen_at=2e9)  # type: ignore[misc]
    assert math.isclose(end - start, 0.0025, abs_tol=1e-6) and math.isclose(end, 1e9 + 0.009)


ints = st.one_of(st.none(), st.integers(), st.booleans(), st.text(max_size=3))
nums = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans())


@settings(max_examples=300)
@given(created=ints, started=ints, completed=ints, dur=nums, seen=st.floats(0, 4e9))
def test_times_never_end_before_they_start(created: Any, started: Any, completed: Any, dur: Any, seen: float
                                           ) -> None:
    t = flight.times({"time_created_ns": created, "time_discovered_started_ns": started,
                      "time_discovered_completed_ns": completed, "duration_ms": dur}, seen)
    if t is not None:
        assert math.isfinite(t[0]) and math.isfinite(t[1]) and t[1] >= t[0] >= 0


@settings(max_examples=300)
@given(sizes=st.lists(st.lists(st.integers(-3, 2**40), max_size=4), max_size=3),
       dtypes=st.lists(st.sampled_from([*flight.DTYPE_BYTES, "Weird", 7]), max_size=3))
def test_bytes_are_exact_or_absent(sizes: list[list[int]], dtypes: list[Any]) -> None:
    nb = flight.input_bytes(sizes, dtypes)
    if nb is not None:
        assert nb == sum(math.prod(s) * flight.DTYPE_BYTES[d] for s, d in zip(sizes, dtypes, strict=True))
        assert nb >= 0
