"""The final dump on SIGTERM (#45 item 4): a rank that is told to stop (torchrun tearing a failed job
down, Slurm's ``scancel`` or time limit, Kubernetes deleting the pod) sends what it has before it goes.

What goes out, within ``FABRICSCOPE_TERM_FLUSH_S`` (default 2 s) of the signal: the collective or
checkpoint the rank is inside, at once and marked ``final`` (lastwords.py), the CUDA timings that have
completed, the Flight Recorder's last entries, everything queued for the service (what the service does
not take in time goes to the spool), and ``rank_exit`` {rank, signal}.

How, without changing what SIGTERM does to the program:

- A rank hung in a collective is stuck in C++: Python runs a signal handler only when that call
  returns, which it never does. So the dump does not run in the handler. ``signal.set_wakeup_fd``
  makes the C-level handler write the signal's number to a socket at once, whatever the main thread
  is doing, and a daemon thread reading that socket does the dump.
- The previous disposition stays in charge. A Python handler the program installed before
  ``Recorder.start()`` is called by ours, in the main thread, as before (the dump runs beside it, on
  the other thread; the program's own shutdown goes on as it would). ``SIG_IGN``: still ignored,
  after the dump. ``SIG_DFL``: the process still dies of SIGTERM (exit status -15), once the dump
  ended or its time ran out: the default disposition is put back and the signal raised again.
- Not installed (one INFO line) when ``start()`` does not run in the main thread, when the program
  already has a wakeup fd (asyncio's), or when the previous handler is not Python's (a C library's),
  or with ``FABRICSCOPE_TERM_FLUSH_S=0``. A process forked after start (a DataLoader worker) gets the
  previous disposition back and no wakeup fd: its SIGTERM is its own, as before.
- The watchdog: torch offers no Python hook when the NCCL watchdog times a collective out (it
  aborts the process, SIGABRT, which no handler survives). The in-flight notice
  (``FABRICSCOPE_INFLIGHT_S``, 2 s) has gone out long before its timeout (10 min by default).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import threading
import time
from typing import Any

log = logging.getLogger("fabricscope.training")

DEFAULT_FLUSH_S = 2.0


class Farewell:
    def __init__(self, dump: Any, *, timeout_s: float = DEFAULT_FLUSH_S, on_signal: Any = None) -> None:
        """``dump(dying, timeout_s)``: the recorder's final dump (never raises). ``on_signal()``: noted
        in the main thread as the signal reaches Python, before the program's own handler runs (which
        may close the recorder before the watcher thread's dump has begun)."""
        self.dump, self.timeout, self.on_signal = dump, timeout_s, on_signal
        self.previous: Any = None
        self.installed = False
        self.done = threading.Event()
        self._fired = threading.Lock()
        self._pid = os.getpid()
        self._r: socket.socket | None = None
        self._w: socket.socket | None = None

    def install(self) -> bool:
        if threading.current_thread() is not threading.main_thread():
            log.info("fabricscope: no final dump on SIGTERM: the recorder was started outside the main thread")
            return False
        prev = signal.getsignal(signal.SIGTERM)
        if prev is None:
            log.info("fabricscope: no final dump on SIGTERM: its handler was not set from Python")
            return False
        r, w = socket.socketpair()
        r.setblocking(True)
        w.setblocking(False)
        old_fd = signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        if old_fd != -1:  # the program's (asyncio's): it stays, without us
            signal.set_wakeup_fd(old_fd)
            r.close()
            w.close()
            log.info("fabricscope: no final dump on SIGTERM: the program already uses a signal wakeup fd")
            return False
        self.previous, self._r, self._w = prev, r, w
        signal.signal(signal.SIGTERM, self._handler)
        os.register_at_fork(after_in_child=self._in_child)
        threading.Thread(target=self._watch, name="fabricscope-farewell", daemon=True).start()
        self.installed = True
        return True

    def uninstall(self) -> None:
        """At a clean close in the main thread: the previous disposition and no wakeup fd again."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            return
        self.installed = False
        try:
            if signal.getsignal(signal.SIGTERM) == self._handler:
                signal.signal(signal.SIGTERM, self.previous)
            old = signal.set_wakeup_fd(-1)
            if self._w is not None and old != self._w.fileno():
                signal.set_wakeup_fd(old)  # not ours (set since): leave it as it was
        except (ValueError, OSError) as e:
            log.debug("fabricscope: SIGTERM handler not removed: %s", e)

    def _handler(self, signum: int, frame: Any) -> None:
        """Python's handler, in the main thread whenever it gets there: tell the watcher (in case the
        wakeup fd was replaced since), then the program's own handler, if it had one."""
        if os.getpid() != self._pid:  # a fork that skipped _in_child: SIGTERM as it was
            signal.signal(signal.SIGTERM, self.previous)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        try:
            if self._w is not None:
                self._w.send(bytes([signal.SIGTERM]))
        except OSError:
            pass
        if self.on_signal is not None:
            try:
                self.on_signal()
            except Exception as e:  # never into the program's handler or its training loop
                log.debug("fabricscope: SIGTERM noted with an error: %s", e)
        if callable(self.previous):
            self.previous(signum, frame)

    def _in_child(self) -> None:
        if not self.installed:
            return
        self.installed = False
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGTERM, self.previous)
        except (ValueError, OSError):
            pass

    def _watch(self) -> None:
        assert self._r is not None
        while True:
            try:
                got = self._r.recv(64)
            except OSError:
                return
            if not got:
                return
            if signal.SIGTERM in got and self._fired.acquire(blocking=False):
                self._farewell()

    def _farewell(self) -> None:
        dying = self.previous == signal.SIG_DFL
        worker = threading.Thread(target=self.dump, args=(dying, self.timeout), name="fabricscope-final-dump",
                                  daemon=True)
        worker.start()
        worker.join(self.timeout + 0.5)  # the dump bounds itself; this bounds it again
        self.done.set()
        if dying:
            _die_of_sigterm()


def _die_of_sigterm() -> None:
    """Put SIGTERM's default action back (from this thread: libc's signal(), Python allows it only in
    the main thread) and raise it: the process ends as the signal's default would have ended it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal.restype = ctypes.c_void_p
        libc.signal(signal.SIGTERM, None)  # SIG_DFL is 0
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # to this thread: delivered at once
        time.sleep(1.0)
    except (OSError, AttributeError) as e:
        log.warning("fabricscope: SIGTERM's default not restored (%s): exiting with 143", e)
    os._exit(128 + signal.SIGTERM)  # only if the signal did not end us
