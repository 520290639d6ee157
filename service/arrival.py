"""Attribution as data arrives (issue #44 item 7): ingest wakes the attribution worker at once.

On the interval alone a step waited up to ``correlate_interval_s`` (5 s, plus 1 s of jitter) after
its data was in; the lab's first right answers came 4.7-8.2 s after a fault began. Now the ingest
path, once its transaction has committed, calls :meth:`Arrivals.steps` (which job) or
:meth:`Arrivals.telemetry` (how new the samples are). Those only note the job and set an event:
the request never waits for attribution, and never takes a lock held across database work.

:class:`ArrivalWorker` (one thread in ``serve``) waits for that event, lets a burst land for
``correlate_debounce_s`` (64 ranks posting the same step make one pass, not 64), then runs one pass
over every job woken meanwhile. The engine still decides what is ready (all ranks in, telemetry
past the step's window: ``EngineConfig.window_pad`` after its end; the worker is woken from the
shortest pad on); a wake that finds nothing ready costs a few index
lookups. The interval job stays: it is the safety net for anything a wake missed, and the only
trigger for data another process committed (``fabricscope writer`` in NATS mode, another
``serve``): this signal does not cross processes.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Sequence

import psycopg

from fabricscope.service.bus.leases import JobPartitioner

# Step ends kept per job while it waits for telemetry: a job whose NICs never report (so whose
# steps go on the telemetry_stale_s path or the interval job) must not grow this without bound.
MAX_WAITING_ENDS = 256


class Arrivals:
    """Jobs with new data since the worker's last pass; thread-safe, O(1) for a step post."""

    def __init__(self, *, margin_s: float) -> None:
        self.margin_s = margin_s
        self.active = False  # set by the worker: with none running, ingest notes nothing
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._jobs: set[str] = set()
        # Per job, a heap of (step end + margin): when the newest telemetry passes one, the engine
        # may now judge that step, so the job is woken again though no new step came (a long step
        # of a slow job, or the last step before a stall, would otherwise wait for the interval).
        self._due: dict[str, list[float]] = {}

    def steps(self, job: str, latest_end: float | None) -> None:
        """Steps of ``job`` committed, the latest ending at ``latest_end`` (epoch seconds)."""
        if not self.active:
            return
        with self._lock:
            self._jobs.add(job)
            if latest_end is not None:
                due = self._due.setdefault(job, [])
                heapq.heappush(due, latest_end + self.margin_s)
                if len(due) > MAX_WAITING_ENDS:
                    heapq.heappop(due)  # the oldest: an earlier wake or the interval judges it
            self._event.set()

    def telemetry(self, newest_ts: float) -> None:
        """Samples committed, the newest taken at ``newest_ts``: wake the jobs whose steps it may
        have made ready. Approximate (these may not be the job's NICs); the engine checks."""
        if not self.active or not self._due:
            return
        with self._lock:
            for job, due in self._due.items():
                if due and due[0] <= newest_ts:
                    while due and due[0] <= newest_ts:
                        heapq.heappop(due)
                    self._jobs.add(job)
                    self._event.set()
            for job in [j for j, d in self._due.items() if not d]:
                del self._due[job]

    def wake(self) -> None:
        self._event.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._event.wait(timeout_s)

    def take(self) -> set[str]:
        """The jobs woken since the last take, and clear the wake-up."""
        with self._lock:
            jobs, self._jobs = self._jobs, set()
            self._event.clear()
            return jobs


class ArrivalWorker(threading.Thread):
    """Runs ``judge(jobs)`` on its own thread each time ingest wakes it, at most once per debounce."""

    def __init__(self, arrivals: Arrivals, judge: Callable[[set[str]], None], *, debounce_s: float) -> None:
        super().__init__(name="fabricscope-attribution-arrival", daemon=True)
        self.arrivals, self.judge, self.debounce_s = arrivals, judge, debounce_s
        self.passes = 0
        self._stop = threading.Event()

    def start(self) -> None:
        self.arrivals.active = True  # before the thread runs: a post right after start is not lost
        super().start()

    def run(self) -> None:
        try:
            while True:
                self.arrivals.wait()
                # the burst (every rank's post of a step, a collector's flush) lands before the pass
                if self._stop.is_set() or self._stop.wait(self.debounce_s):
                    return
                jobs = self.arrivals.take()
                if jobs:
                    self.passes += 1
                    self.judge(jobs)  # errors are the judge's to log (workers._guarded): the loop goes on
        finally:
            self.arrivals.active = False

    def stop(self, timeout_s: float = 0.0) -> None:
        self._stop.set()
        self.arrivals.wake()
        if timeout_s > 0:
            self.join(timeout_s)


class OwnedJobs:
    """Which jobs this process judges (JobPartitioner's leases), for both triggers.

    The interval job claims all jobs each run (which renews the leases); a wake names a few, and
    asks the database only about a job not claimed within the last third of the lease's TTL
    (a job new since the last interval run, say), so a busy ingest does not write a lease per pass.
    A job another process owns is left to it: that process's interval job judges it.
    """

    def __init__(self, part: JobPartitioner) -> None:
        self.part = part
        self.refresh_s = part.ttl_s / 3
        self._lock = threading.Lock()
        self._known: dict[str, tuple[bool, float]] = {}  # job -> (mine, when claimed, monotonic)

    def claim_all(self, conn: psycopg.Connection, jobs: Sequence[str]) -> list[str]:
        mine = self.part.claim(conn, jobs)
        self._note(jobs, mine)
        return mine

    def mine(self, conn: psycopg.Connection, jobs: Sequence[str]) -> list[str]:
        now = time.monotonic()
        with self._lock:
            stale = [j for j in jobs if j not in self._known or now - self._known[j][1] > self.refresh_s]
        if stale:
            before = set(self.part.owned)
            got = self.part.claim(conn, stale)
            # claim() sets `owned` to its argument's share; the jobs not asked about keep theirs
            self.part.owned = (before - set(stale)) | set(got)
            self._note(stale, got)
        with self._lock:
            return [j for j in jobs if self._known.get(j, (False, 0.0))[0]]

    def _note(self, jobs: Sequence[str], mine: Sequence[str]) -> None:
        now, have = time.monotonic(), set(mine)
        with self._lock:
            self._known = {j: k for j, k in self._known.items() if now - k[1] <= 3 * self.refresh_s}
            self._known.update((j, (j in have, now)) for j in jobs)
