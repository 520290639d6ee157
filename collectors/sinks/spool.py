"""A bounded, durable FIFO of batches on local disk, for when the fabricscope service is away.

One JSON object per line (the batch with its ``batch_id`` kept, so a replay after a crash is
idempotent on the server), appended and fsync'd. The read position lives in a sidecar file
``<path>.offset`` so a process that restarts replays from where the last one stopped, in order.
The file never grows past ``max_bytes``: an append that would not fit is refused (the caller counts
the drop) after compacting away what was already replayed. An exclusive ``flock`` on
``<path>.lock`` keeps two processes from interleaving in one spool.

A record counts as recorded only once its whole line is written and fsync'd: an append that fails
part way (disk full, file size limit) is cut back off the file before the error goes up, so the
file holds whole records only and the next append starts on a line of its own (issue #46 item 7).
On replay a line that is not a batch record (not JSON, or JSON of another shape) is skipped with
one log line and counted, so it can never hold up the records behind it.

Standard library only: the training hook imports this.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path
from typing import Any

from fabricscope.core.errors import FabricscopeError
from fabricscope.core.wire import KINDS

log = logging.getLogger("fabricscope.spool")


def _number_or_str(o: Any) -> Any:
    try:
        return float(o)
    except (TypeError, ValueError, OverflowError):
        return str(o)


def _not_a_batch(rec: Any) -> str | None:
    """Why ``rec`` is not a record ``append`` wrote (a batch record, collectors/sinks/batches.py)."""
    if not isinstance(rec, dict):
        return f"a JSON {type(rec).__name__}, not a batch record"
    if not isinstance(rec.get("batch_id"), str):
        return "no batch_id"
    kind = rec.get("kind")
    if kind == "job":
        return None if isinstance(rec.get("job"), str) and isinstance(rec.get("body"), dict) else "a bad job record"
    if kind not in KINDS:
        return f"unknown kind {str(kind)[:40]!r}"
    return None if isinstance(rec.get("items"), list) else "no items list"


class SpoolLocked(FabricscopeError, OSError):
    """Another process holds this spool."""


class Spool:
    def __init__(self, path: str | Path, max_bytes: int = 64 << 20) -> None:
        self.path = Path(path)
        self.max_bytes = int(max_bytes)
        self.corrupt = 0  # lines skipped on replay because they were not valid JSON
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self._lock_fd)
            raise SpoolLocked(f"spool {self.path} is in use by another process") from e
        self._f = open(self.path, "a+b")  # noqa: SIM115 - lives as long as the spool
        os.chmod(self.path, 0o600)  # batches may hold job names and hostnames; keep them private
        self._offset = self._read_offset()
        self._size = self._f.seek(0, os.SEEK_END)
        if self._offset > self._size:
            self._offset = 0
        self._peeked_end: int | None = None
        if self._size and self._last_byte() != b"\n":
            # A crash mid-append left a partial line: terminate it so it is skipped as one bad
            # record instead of swallowing the next good one.
            self._write(b"\n")

    # -- state ---------------------------------------------------------------------------------
    @property
    def pending_bytes(self) -> int:
        return self._size - self._offset

    def __bool__(self) -> bool:
        return self._size > self._offset

    # -- writing -------------------------------------------------------------------------------
    def append(self, record: dict[str, Any]) -> bool:
        """Append one record durably; False when the spool is full (nothing written)."""
        line = json.dumps(record, separators=(",", ":"), default=_number_or_str).encode() + b"\n"
        if self._size + len(line) > self.max_bytes and self._offset:
            self._compact()
        if self._size + len(line) > self.max_bytes:
            return False
        self._write(line)
        return True

    def _write(self, data: bytes) -> None:
        """All of ``data`` at the end of the file and fsync'd, or none of it (then OSError).
        Unbuffered writes: a buffered file would keep the unwritten rest and add it to the next
        append, so the file and ``_size`` would disagree."""
        fd = self._f.fileno()
        done = 0
        try:
            while done < len(data):
                done += os.pwrite(fd, data[done:], self._size + done)
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, self._size)
                os.fsync(fd)
            except OSError as e:  # the file may now end in a partial line: terminated at next open
                log.warning("spool %s: cannot cut a failed append back off: %s", self.path, e)
            raise
        self._size += len(data)

    # -- reading -------------------------------------------------------------------------------
    def peek(self) -> dict[str, Any] | None:
        """The oldest record not yet replayed, or None. Bad lines are skipped and counted."""
        while self._offset < self._size:
            self._f.seek(self._offset)
            line = self._f.readline()
            end = self._offset + len(line)
            try:
                rec = json.loads(line)
                why = _not_a_batch(rec)
            except ValueError as e:
                why = f"not JSON ({e})"
            if why is not None:
                self.corrupt += 1
                log.warning("spool %s: skipping the record at byte %d: %s", self.path, self._offset, why)
                self._advance(end)
                continue
            self._peeked_end = end
            return rec
        return None

    def pop(self) -> None:
        """Mark the record returned by the last ``peek`` as replayed."""
        if self._peeked_end is not None:
            self._advance(self._peeked_end)
            self._peeked_end = None

    def _advance(self, end: int) -> None:
        self._offset = end
        if self._offset >= self._size:
            # Everything replayed: start the file afresh so it never creeps toward the bound.
            self._f.truncate(0)
            self._f.flush()
            os.fsync(self._f.fileno())
            self._size = self._offset = 0
        self._write_offset()

    def _compact(self) -> None:
        """Drop the replayed prefix by rewriting the rest (only when an append needs the room)."""
        self._f.seek(self._offset)
        rest = self._f.read()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "wb") as t:
                t.write(rest)
                t.flush()
                os.fsync(t.fileno())
        except OSError:
            tmp.unlink(missing_ok=True)  # the spool itself is untouched
            raise
        os.replace(tmp, self.path)
        self._f.close()
        self._f = open(self.path, "a+b")  # noqa: SIM115
        self._size, self._offset = len(rest), 0
        self._peeked_end = None
        self._write_offset()

    # -- offset sidecar ------------------------------------------------------------------------
    def _offset_path(self) -> Path:
        return self.path.with_name(self.path.name + ".offset")

    def _read_offset(self) -> int:
        try:
            return max(0, int(self._offset_path().read_text().strip() or 0))
        except (OSError, ValueError):
            return 0

    def _write_offset(self) -> None:
        """Best effort: when the sidecar cannot be written (disk full) the position is kept in
        memory, and a restart replays a few batches again (their ids make that harmless)."""
        tmp = self._offset_path().with_name(self._offset_path().name + ".tmp")
        try:
            with open(tmp, "w") as f:
                f.write(str(self._offset))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._offset_path())
        except OSError as e:
            log.warning("spool %s: read position not saved: %s", self.path, e)

    def _last_byte(self) -> bytes:
        self._f.seek(self._size - 1)
        return self._f.read(1)

    def close(self) -> None:
        try:
            self._f.close()
        finally:
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)

    def __repr__(self) -> str:
        return f"Spool({str(self.path)!r}, pending_bytes={self.pending_bytes})"
