"""Who owns the embedded PostgreSQL: a small file in the data directory naming the process that
started it (issue #46 item 9).

A `serve` killed without its clean-up (SIGKILL, a crash, a SIGHUP before it was handled) leaves the
server running with parent 1. The next `serve` finds it running; the owner file tells a server left
behind (its owner is gone: adopt it, say so, and stop it with this service) from one another live
`serve` started (leave it to that one). A process is named by pid and its start time (from
/proc), so a pid reused by an unrelated process does not count as the owner being alive.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_FILE = "pg.owner"


@dataclass(frozen=True)
class Owner:
    pid: int
    started: str  # /proc/<pid>/stat field 22 (clock ticks since boot); "" where /proc is absent

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # alive, under another user
            pass
        return not self.started or _start_time(self.pid) == self.started


def _start_time(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: count fields after its last ")"
    return stat.rsplit(")", 1)[1].split()[19]


def me() -> Owner:
    return Owner(os.getpid(), _start_time(os.getpid()))


def read(data_dir: Path) -> Owner | None:
    """The recorded owner; None when there is none, or the file is unreadable (then said so)."""
    path = data_dir / OWNER_FILE
    try:
        doc = json.loads(path.read_text())
        return Owner(int(doc["pid"]), str(doc.get("started", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("embedded PostgreSQL owner file %s unreadable (%s): treated as no owner", path, exc)
        return None


def claim(data_dir: Path) -> None:
    """Record this process as the owner (written whole, then renamed into place)."""
    path = data_dir / OWNER_FILE
    tmp = path.with_name(f".{OWNER_FILE}.{os.getpid()}")
    owner = me()
    try:
        tmp.write_text(json.dumps({"pid": owner.pid, "started": owner.started}))
        os.replace(tmp, path)
    except OSError as exc:  # the server runs all the same; a later start will find no owner and adopt it
        log.warning("embedded PostgreSQL owner file %s not written: %s", path, exc)


def release(data_dir: Path) -> None:
    """Forget the owner, if it is this process."""
    if read(data_dir) == me():
        try:
            (data_dir / OWNER_FILE).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("embedded PostgreSQL owner file not removed: %s", exc)
