"""The lab's ``--answers stored`` mode: watch the answers the service's background worker stores.

The default mode (``ask``) asks for each slow step's attribution 3 s after its end, every 2 s, and
so measures the lab's own poll, not the service: a GET attributes on demand. Issue #44 item 7 is
about when the service itself has the answer (judging on arrival against a 5 s interval), so
here the lab asks for nothing while the job runs: it reads the ``attributions`` table every
``POLL_S`` and notes when each step's stored (layer, component) first appeared or changed. The
time is when the lab saw the row, so a committed answer is counted at most ``POLL_S`` late;
``computed_at`` would be earlier than the commit (a pass is one transaction).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import psycopg

from tests.lab.evaluate import History

log = logging.getLogger("fabricscope.lab")

POLL_S = 0.2
# computed_at is the start of the pass's transaction, committed later: rows are re-read this far
# behind the newest computed_at seen, so a long pass's rows are not skipped
OVERLAP_S = 30.0



class StoredWatcher:
    def __init__(self, dsn: str, job: str) -> None:
        self.dsn, self.job = dsn, job
        self.history: History = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lab-stored-answers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> History:
        self._stop.set()
        self._thread.join(10)
        return self.history

    def _run(self) -> None:
        mark = 0.0
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
                    while not self._stop.wait(POLL_S):
                        mark = self._read(conn, mark)
            except psycopg.Error as exc:
                log.warning("lab: stored answers: %s", exc)
                with contextlib.suppress(Exception):
                    self._stop.wait(1.0)

    def _read(self, conn: psycopg.Connection, mark: float) -> float:
        rows = conn.execute(
            "SELECT step, layer, component, extract(epoch FROM computed_at)::float8 FROM attributions "
            "WHERE job = %s AND computed_at >= to_timestamp(%s)", (self.job, mark - OVERLAP_S)).fetchall()
        seen = time.time()
        for step, layer, component, at in rows:
            h = self.history.setdefault(int(step), [])
            if not h or h[-1][1:] != (layer, component):
                h.append((seen, str(layer), component))
            mark = max(mark, float(at))
        return mark
