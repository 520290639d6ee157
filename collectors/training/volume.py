"""Bounded collective volume (``FABRICSCOPE_COLLECTIVE_DETAIL=bounded``): a summary per step, records
only where they are wanted.

One record per rank per collective is ~50 rows/s per GPU; at 10k GPUs no database node takes it. In
``bounded`` mode every rank sends, for every step, one ``collective_summaries`` item per (op, size
bucket, group size): count, total and max seconds, bytes, and the slowest collective's (group, seq).
The full records of a step go out only when

- the step was slow here: its time over ``slow_factor`` x the median of this rank's recent steps;
- the service asked for it (``GET /v1/jobs/{job}/detail_requests``, polled from the sender thread);
- this rank is in the rotating sample: ``(rank + step // period) % min(sample, world) == 0``, so every
  rank is sampled every ``sample`` periods and every step has at least one sampled rank; or, with
  ``sample_by="step"``, every rank for one step in ``sample`` (whole groups: what the service's
  per-collective own time needs, docs/training-hook.md);
- the step never ended: at close or SIGTERM, the step the rank was in goes in full (its last moments).

The last ``history`` steps' records are kept, so a step asked for late is sent from here (a step
still running when asked for sends what it holds, and the rest as it comes). Records that
leave the history unsent are counted (``stats["collectives_summarized_only"]``), a request for a
step already gone too (``stats["detail_requests_missed"]``).

Threads: :meth:`add` (any thread) and :meth:`step_done` (the training thread) only append to a
deque; the sender thread's :meth:`tick` does the rest. Nothing here raises into the caller.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("fabricscope.training")

MODES = ("all", "bounded")
_MEDIAN_OF = 32  # recent steps the slow flag compares against
_MIN_BASELINE = 5  # steps needed before any step can be called slow
_MAX_PENDING_REQUESTS = 1024  # steps asked for ahead of the loop (bounded: a wrong request cannot grow it)


def bucket(nbytes: Any) -> int:
    """The largest power of 4 at or below ``nbytes`` (1, 4, 16, ... bytes); 0 for no bytes or unknown."""
    if type(nbytes) is not int or nbytes < 1:
        return 0
    return 1 << (2 * ((nbytes.bit_length() - 1) // 2))


@dataclass(frozen=True)
class VolumeSettings:
    history: int = 64
    slow_factor: float = 1.2
    sample: int = 16
    period: int = 1
    poll_s: float = 5.0
    settle_s: float = 1.0  # a step is summarized this long after it ended (CUDA timings resolve late)
    sample_by: str = "rank"  # "rank": a rotating 1 in `sample` ranks each step; "step": all ranks, 1 step in `sample`

    @classmethod
    def from_env(cls, env: Any) -> VolumeSettings:
        d = cls()

        def num(name: str, default: float, lo: float, hi: float) -> float:
            raw = env.get(name, "")
            try:
                v = float(raw) if raw else default
            except ValueError:
                log.warning("fabricscope: %s=%r is not a number; %s used", name, raw, default)
                return default
            return min(max(v, lo), hi)

        return cls(history=int(num("FABRICSCOPE_DETAIL_HISTORY", d.history, 2, 4096)),
                   slow_factor=num("FABRICSCOPE_DETAIL_SLOW_FACTOR", d.slow_factor, 1.0, 100.0),
                   sample=int(num("FABRICSCOPE_DETAIL_SAMPLE", d.sample, 1, 1 << 20)),
                   period=int(num("FABRICSCOPE_DETAIL_PERIOD", d.period, 1, 1 << 20)),
                   poll_s=num("FABRICSCOPE_DETAIL_POLL_S", d.poll_s, 0.5, 600.0),
                   settle_s=num("FABRICSCOPE_DETAIL_SETTLE_S", d.settle_s, 0.0, 60.0),
                   sample_by=_choice(env, "FABRICSCOPE_DETAIL_SAMPLE_BY", ("rank", "step")))


def _choice(env: Any, name: str, choices: tuple[str, ...]) -> str:
    raw = env.get(name, "") or choices[0]
    if raw not in choices:
        log.warning("fabricscope: %s=%r is not one of %s; %r used", name, raw, ", ".join(choices), choices[0])
        return choices[0]
    return raw


class _Book:
    """One step's records while it is in the history."""

    __slots__ = ("detailed", "end", "records", "slow", "start", "summarized")

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.start: float | None = None
        self.end: float | None = None
        self.summarized = self.detailed = self.slow = False


# poll(after_id) -> (steps asked for, the id to ask after next time); None when the service did not answer
Poll = Callable[[int], tuple[list[int], int] | None]


class BoundedDetail:
    def __init__(self, settings: VolumeSettings, submit: Callable[[str, dict[str, Any]], None],
                 rank: Callable[[], int], world: Callable[[], int | None], poll: Poll | None = None) -> None:
        self.settings = settings
        self._submit, self._rank, self._world, self._poll = submit, rank, world, poll
        self._inbox: deque[dict[str, Any]] = deque()
        self._ends: deque[tuple[int, float, float, bool]] = deque()
        self._books: dict[int, _Book] = {}
        self._durations: deque[float] = deque(maxlen=_MEDIAN_OF)
        self._requested: set[int] = set()
        self._after = 0
        self._next_poll = 0.0
        self._newest = -1
        self._lock = threading.Lock()
        self.stats = {"collective_summaries": 0, "collectives_detailed": 0, "collectives_summarized_only": 0,
                      "detail_steps_slow": 0, "detail_steps_sampled": 0, "detail_steps_requested": 0,
                      "detail_steps_unfinished": 0,
                      "detail_requests_missed": 0, "detail_polls_failed": 0}

    # -- caller side (cheap) ------------------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        self._inbox.append(record)

    def step_done(self, step: int, start: float, end: float, completed: bool) -> None:
        self._ends.append((step, start, end, completed))

    # -- sender thread ------------------------------------------------------------------------------
    def tick(self, *, final: bool = False, closing: bool = False, now: float | None = None) -> None:
        """Take in what arrived, poll for requests when due, summarize the steps that have settled
        (all ended ones when ``final``, and the one still running when ``closing``), send the detail
        they call for, and trim the history. Only the sender thread's own ticks poll (a flush, close or
        SIGTERM must not wait for the service's answer), and never while holding the lock."""
        now = time.time() if now is None else now
        got: tuple[list[int], int] | None = None
        polled = self._poll is not None and not (final or closing) and now >= self._next_poll
        if polled:
            self._next_poll = now + self.settings.poll_s
            got = self._fetch()
        with self._lock:
            try:
                self._take_in()
                if polled:
                    self._apply_requests(got)
                for step in sorted(self._books):
                    self._settle(step, self._books[step], now, final or closing, closing)
                self._trim()
            except Exception as e:  # nothing may reach the sender's loop or the training loop
                log.warning("fabricscope: bounded collective detail: %s", e)

    def _settle(self, step: int, b: _Book, now: float, final: bool, closing: bool) -> None:
        """Summarize a step once it has ended and settled; a step that never ended is summarized once it
        leaves the history, or at close and SIGTERM (the step the rank was in: its records go in full)."""
        if b.summarized:
            return
        ended = b.end is not None and (final or now - b.end >= self.settings.settle_s)
        unfinished = closing and b.end is None
        if not (ended or unfinished or step <= self._newest - self.settings.history):
            return
        self._summarize(step, b, b.records)
        b.summarized = True
        if b.detailed:
            return
        why = ("slow" if b.slow else "unfinished" if unfinished else "requested" if step in self._requested
               else "sampled" if self._sampled(step) else None)
        if why is not None:
            self._detail(step, b, why)

    def _take_in(self) -> None:
        while self._ends:
            step, start, end, completed = self._ends.popleft()
            b = self._book(step)
            b.start, b.end = start, end
            dur = end - start
            if completed and dur > 0:
                if len(self._durations) >= _MIN_BASELINE and dur > self.settings.slow_factor * statistics.median(
                        self._durations):
                    b.slow = True
                self._durations.append(dur)
        late: dict[int, list[dict[str, Any]]] = {}
        while self._inbox:
            rec = self._inbox.popleft()
            raw = rec.get("step")
            if type(raw) is not int:  # outside any step (init, the closing barrier): few, sent in full
                self._send_detail(rec)
                continue
            step = raw
            if step not in self._books and step <= self._newest - self.settings.history:
                self._summarize(step, _Book(), [rec])  # its step left the history: a summary item alone
                continue
            b = self._book(step)
            b.records.append(rec)
            if b.detailed:  # its step goes in full (asked for while it ran, or a late timing)
                self._send_detail(rec)
            if b.summarized:  # a CUDA timing resolved after its step was summarized: one more summary
                late.setdefault(step, []).append(rec)  # item, which the service adds to the step's
        for step, recs in late.items():
            self._summarize(step, self._books[step], recs)

    def _book(self, step: int) -> _Book:
        b = self._books.get(step)
        if b is None:
            b = self._books[step] = _Book()
            self._newest = max(self._newest, step)
        return b

    def _sampled(self, step: int) -> bool:
        if self.settings.sample_by == "step":  # every rank, one step in `sample`: whole groups
            return (step // self.settings.period) % self.settings.sample == 0
        world = self._world() or self.settings.sample
        m = max(1, min(self.settings.sample, world))
        return (self._rank() + step // self.settings.period) % m == 0

    def _summarize(self, step: int, b: _Book, records: list[dict[str, Any]]) -> None:
        acc: dict[tuple[str, int, int], dict[str, Any]] = {}
        rank = self._rank()
        for r in records:
            nb = r.get("bytes")
            key = (str(r.get("op")), bucket(nb), int(r.get("group_size") or 0))
            dur = max(0.0, float(r["end"]) - float(r["start"]))
            s = acc.get(key)
            if s is None:
                s = acc[key] = {"rank": rank, "step": step, "op": key[0], "bucket": key[1], "count": 0,
                                "total_s": 0.0, "max_s": -1.0, "start": r["start"], "end": r["end"]}
                if key[2]:
                    s["group_size"] = key[2]
            s["count"] += 1
            s["total_s"] += dur
            s["start"], s["end"] = min(s["start"], r["start"]), max(s["end"], r["end"])
            if type(nb) is int:
                s["bytes"] = s.get("bytes", 0) + nb
            if dur > s["max_s"]:
                s["max_s"] = dur
                s.pop("slowest_group", None)
                s.pop("slowest_seq", None)
                if r.get("group") is not None:
                    s["slowest_group"] = r["group"]
                if r.get("seq") is not None:
                    s["slowest_seq"] = r["seq"]
        for s in acc.values():
            self._submit("collective_summaries", s)
        self.stats["collective_summaries"] += len(acc)

    def _detail(self, step: int, b: _Book, why: str) -> None:
        b.detailed = True
        self.stats[f"detail_steps_{why}"] += 1
        self._requested.discard(step)
        for r in b.records:
            self._send_detail(r)

    def _send_detail(self, rec: dict[str, Any]) -> None:
        self._submit("collectives", rec)
        self.stats["collectives_detailed"] += 1

    def _fetch(self) -> tuple[list[int], int] | None:
        assert self._poll is not None
        try:
            return self._poll(self._after)
        except Exception:
            return None

    def _apply_requests(self, got: tuple[list[int], int] | None) -> None:
        if got is None:
            self.stats["detail_polls_failed"] += 1
            return
        steps, self._after = got
        for step in steps:
            b = self._books.get(step)
            if b is not None:
                if not b.detailed:  # in the history (ended or still running): what it holds goes now
                    self._detail(step, b, "requested")
            elif step > self._newest:
                if len(self._requested) < _MAX_PENDING_REQUESTS:
                    self._requested.add(step)
            else:
                self.stats["detail_requests_missed"] += 1

    def _trim(self) -> None:
        summarized = [s for s, b in self._books.items() if b.summarized]
        for step in sorted(summarized)[:max(0, len(summarized) - self.settings.history)]:
            b = self._books.pop(step)
            if not b.detailed:
                self.stats["collectives_summarized_only"] += len(b.records)
        self._requested = {s for s in self._requested if s in self._books or s > self._newest}


def http_poll(transport: Any, job: str, rank: Callable[[], int]) -> Poll | None:
    """The poll of ``GET /v1/jobs/{job}/detail_requests`` over the sender's HTTP transport; None for a
    transport without GET (NATS, the database): the service then cannot ask, the rest works."""
    get = getattr(transport, "get_json", None)
    if get is None:
        return None
    from urllib.parse import quote

    def poll(after: int) -> tuple[list[int], int] | None:
        doc = get(f"/v1/jobs/{quote(job, safe='')}/detail_requests?rank={rank()}&after={after}")
        if type(doc) is not dict or type(doc.get("requests")) is not list:
            return None
        steps, last = [], after
        for r in doc["requests"]:
            if type(r) is dict and type(r.get("step")) is int and type(r.get("id")) is int:
                steps.append(r["step"])
                last = max(last, r["id"])
        return steps, last

    return poll


def world_size(env: Any) -> int | None:
    """The job's world size: torch.distributed's once initialised, else torchrun's WORLD_SIZE."""
    import sys

    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size())
    except Exception:
        pass
    raw = str(env.get("WORLD_SIZE", ""))
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


__all__ = ["MODES", "BoundedDetail", "VolumeSettings", "bucket", "http_poll", "world_size"]
