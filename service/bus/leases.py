"""Leases in PostgreSQL (table ``leases``) so several engine/alert workers never do a job twice.

Times are the database's ``now()``, never a worker's clock, so skew between machines does not
matter. A lease is taken or renewed in one statement::

    INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE leases.expires_at < now() OR leases.holder = me

which succeeds for the current holder (renew) or when the old lease has expired (take-over), and
for nobody else. :func:`fenced` re-checks the lease *inside* the transaction that stores the
results and keeps the lease row share-locked until commit, so a worker that paused past its
expiry cannot overwrite the work of the one that took over.

:class:`JobPartitioner` spreads jobs over the live workers: each worker keeps a membership lease
(``<prefix>:member:<holder>``), ranks jobs by rendezvous hashing over the live members, takes the
jobs it ranks first for, and lets go of jobs another live member
ranks first for, so a new worker gets its share and a dead one's jobs move within one TTL.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import uuid
from collections.abc import Iterator, Sequence

import psycopg

from fabricscope.core.errors import FabricscopeError

_UPSERT = """
INSERT INTO leases (name, holder, expires_at) VALUES (%(name)s, %(holder)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
WHERE leases.expires_at < now() OR leases.holder = EXCLUDED.holder
RETURNING holder
"""


class LeaseLost(FabricscopeError):
    """The lease is no longer this worker's: drop the work, another worker owns it now."""


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def acquire(conn: psycopg.Connection, name: str, holder: str, ttl_s: float) -> bool:
    """Take or renew ``name`` for ``ttl_s`` seconds; False when another holder's lease is live."""
    return conn.execute(_UPSERT, {"name": name, "holder": holder, "ttl": float(ttl_s)}).fetchone() is not None


renew = acquire


def release(conn: psycopg.Connection, name: str, holder: str) -> bool:
    cur = conn.execute("DELETE FROM leases WHERE name = %s AND holder = %s", (name, holder))
    return cur.rowcount > 0


def holder_of(conn: psycopg.Connection, name: str) -> str | None:
    row = conn.execute("SELECT holder FROM leases WHERE name = %s AND expires_at >= now()", (name,)).fetchone()
    return None if row is None else str(row[0])


@contextlib.contextmanager
def fenced(conn: psycopg.Connection, name: str, holder: str) -> Iterator[None]:
    """A transaction that commits only while ``holder`` still holds ``name`` (raises LeaseLost)."""
    with conn.transaction():
        row = conn.execute("SELECT 1 FROM leases WHERE name = %s AND holder = %s AND expires_at >= now() FOR SHARE",
                           (name, holder)).fetchone()
        if row is None:
            raise LeaseLost(name)
        yield


def _score(member: str, job: str) -> bytes:
    return hashlib.blake2b(f"{member}\0{job}".encode(), digest_size=8).digest()


def preferred(members: Sequence[str], job: str) -> str:
    """Rendezvous (highest random weight) hashing: stable, and a member joining or leaving moves
    only the jobs it ranks first for."""
    return max(members, key=lambda m: _score(m, job))


class JobPartitioner:
    """Which jobs this worker should process now; call :meth:`claim` at the start of each run."""

    def __init__(self, prefix: str = "correlate", *, holder: str | None = None, ttl_s: float = 30.0) -> None:
        self.prefix = prefix
        self.holder = holder or default_holder()
        self.ttl_s = ttl_s
        self.owned: set[str] = set()

    def lease_name(self, job: str) -> str:
        return f"{self.prefix}:job:{job}"

    def _members(self, conn: psycopg.Connection) -> list[str]:
        acquire(conn, f"{self.prefix}:member:{self.holder}", self.holder, self.ttl_s)
        rows = conn.execute("SELECT holder FROM leases WHERE name LIKE %s AND expires_at >= now()",
                            (f"{self.prefix}:member:%",)).fetchall()
        return sorted({r[0] for r in rows} | {self.holder})

    def claim(self, conn: psycopg.Connection, jobs: Sequence[str]) -> list[str]:
        """Renew/take the leases of this worker's share of ``jobs``; returns the jobs it holds."""
        members = self._members(conn)
        held: dict[str, str] = dict(conn.execute(
            "SELECT name, holder FROM leases WHERE name = ANY(%s) AND expires_at >= now()",
            ([self.lease_name(j) for j in jobs],)).fetchall())
        mine: list[str] = []
        for job in jobs:
            name = self.lease_name(job)
            want = preferred(members, job) == self.holder
            current = held.get(name)
            if current == self.holder and not want:
                release(conn, name, self.holder)  # hand it to the member that ranks first for it
                continue
            # A dead worker's membership expires, so its jobs rank first for a live member here;
            # the acquire fails only while the previous holder has not let go (one run at most).
            if want and acquire(conn, name, self.holder, self.ttl_s):
                mine.append(job)
        self.owned = set(mine)
        return mine

    def release_all(self, conn: psycopg.Connection) -> None:
        conn.execute("DELETE FROM leases WHERE holder = %s AND name LIKE %s", (self.holder, f"{self.prefix}:%"))
        self.owned.clear()
