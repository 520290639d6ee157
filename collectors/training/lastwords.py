"""Last words of a rank that stops: what it is inside, posted while it is still inside it.

A rank blocked in an all-reduce posts nothing for it (a collective record is sent when it
completes), and a rank inside a long checkpoint posts nothing until it ends. Without these notices
the service cannot tell who waits for whom when a job hangs (service/hang). A daemon thread looks,
every `interval/2` seconds, at the timer's one in-flight slot and the recorder's open checkpoint;
what has been in progress for at least `interval` seconds is posted once as an event:

* ``collective_entered`` {rank, group, seq, op, step}: the seq the call will get (p2p ops skipped:
  their seq is per peer and no group waits on them);
* ``checkpoint_in_progress`` {rank, step}: start = the checkpoint's start.

Two more, once each: ``hang_watch`` {rank} when the rank is known (the service judges hangs only
for jobs whose ranks say they send these notices) and ``rank_exit`` {rank} at a clean close (a
job whose ranks all exited has ended, it is not hung; a killed rank sends nothing: still hung).

The thread only reads; any error is counted and ignored (never raises into, never blocks training).
Collectives waited on after an async call (work.wait()) are not in the slot: not covered.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

DEFAULT_INTERVAL_S = 2.0


class LastWords:
    def __init__(self, rec: Any, *, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.rec, self.interval = rec, max(0.05, interval_s)
        self._posted_call: object = None
        self._posted_ckpt: object = None
        self._announced = False
        self._exit_attrs: dict[str, Any] = {}  # rank_exit's extra attrs: {"signal": "SIGTERM"} after final()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fabricscope-lastwords", daemon=True)
        self.errors = 0

    def start(self) -> LastWords:
        self._announce()  # at once when the rank is known (torchrun's RANK): a short run says it too
        self._thread.start()
        return self

    def _announce(self) -> None:
        if not self._announced and self.rec._rank_known():
            self._announced = True
            self._post("hang_watch", time.time(), {"rank": self.rec.rank})

    def stop(self) -> None:
        """At the recorder's close: the thread ends, and a rank that announced itself says it exits."""
        self._stop.set()
        try:
            if self._announced:
                self._post("rank_exit", time.time(), {"rank": self.rec.rank, **self._exit_attrs})
        except Exception:
            self.errors += 1

    def signalled(self, signal_name: str) -> None:
        """The process was told to stop: its rank_exit names the signal (final() sends the rest)."""
        self._exit_attrs = {"signal": signal_name}

    def final(self, signal_name: str) -> None:
        """The process was told to stop (farewell.py): what it is inside goes out now, however short
        a time it has been there, marked ``final``; its rank_exit will name the signal."""
        self._announce()
        self._exit_attrs = {"signal": signal_name}
        timer = self.rec._timer_obj
        call = timer.inflight if timer is not None else None
        if call is not None and call is not self._posted_call:
            self._posted_call = call
            ev = self._entered(timer, call)
            if ev is not None:
                self._post("collective_entered", ev[0], {**ev[1], "final": signal_name})
        ck = self.rec._ckpt
        if ck is not None and ck is not self._posted_ckpt:
            self._posted_ckpt = ck
            attrs: dict[str, Any] = {"rank": self.rec.rank, "final": signal_name}
            if ck[2] is not None:
                attrs["step"] = ck[2]
            self._post("checkpoint_in_progress", ck[0] + self.rec.wall_offset, attrs)

    def _post(self, kind: str, start: float, attrs: dict[str, Any]) -> None:
        self.rec._submit("events", {"kind": kind, "source": self._host(), "start": start, "attrs": attrs})

    def _loop(self) -> None:
        while not self._stop.wait(self.interval / 2):
            try:
                self.look(time.perf_counter())
            except Exception:  # a look that fails is skipped; the next one tries again
                self.errors += 1

    def look(self, now: float) -> None:
        rec = self.rec
        self._announce()
        timer = rec._timer_obj
        call = timer.inflight if timer is not None else None
        if call is not None and call is not self._posted_call and now - call[3] >= self.interval:
            self._posted_call = call
            ev = self._entered(timer, call)
            if ev is not None:
                self._post("collective_entered", *ev)
        ck = rec._ckpt
        if ck is not None and ck is not self._posted_ckpt and now - ck[0] >= self.interval:
            self._posted_ckpt = ck
            attrs: dict[str, Any] = {"rank": rec.rank}
            if ck[2] is not None:
                attrs["step"] = ck[2]
            self._post("checkpoint_in_progress", ck[0] + rec.wall_offset, attrs)

    def _entered(self, timer: Any, call: tuple[Any, ...]) -> tuple[float, dict[str, Any]] | None:
        spec, args, kwargs, t0 = call
        op, _t_pos, g_pos, _a_pos, _always_async, peer, _p_pos = spec
        if peer is not None:
            return None
        pg = kwargs["group"] if "group" in kwargs else (args[g_pos] if 0 <= g_pos < len(args) else None)
        g = timer.group(pg)
        attrs: dict[str, Any] = {"rank": self.rec.rank, "group": g.name, "seq": g.seq + 1, "op": op}
        if self.rec._step is not None:
            attrs["step"] = self.rec._step
        return t0 + self.rec.wall_offset, attrs

    def _host(self) -> str:
        return str(self.rec._host or self.rec._env.get("FABRICSCOPE_HOST") or socket.gethostname())
