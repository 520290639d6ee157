"""Leases in PostgreSQL: exclusive, renewable, expiring on the database clock, fenced, balanced."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from fabricscope.service.bus import leases


@pytest.fixture
def conn(database_url):
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute("DELETE FROM leases WHERE name LIKE 't-%' OR name LIKE 'tp%'")
        yield c


def test_acquire_renew_expire_release(conn) -> None:
    assert leases.acquire(conn, "t-a", "w1", 30)
    assert not leases.acquire(conn, "t-a", "w2", 30)  # live lease of another holder
    assert leases.renew(conn, "t-a", "w1", 30)
    assert leases.holder_of(conn, "t-a") == "w1"
    assert not leases.release(conn, "t-a", "w2")
    assert leases.release(conn, "t-a", "w1")
    assert leases.acquire(conn, "t-a", "w2", 0.3)
    assert not leases.acquire(conn, "t-a", "w1", 30)
    time.sleep(0.5)  # expired on the database clock: anyone may take it over
    assert leases.holder_of(conn, "t-a") is None
    assert leases.acquire(conn, "t-a", "w1", 30)
    assert leases.holder_of(conn, "t-a") == "w1"


def test_concurrent_acquire_has_one_winner(database_url, conn) -> None:
    wins: list[str] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        with psycopg.connect(database_url, autocommit=True) as c:
            barrier.wait()
            if leases.acquire(c, "t-race", f"w{i}", 30):
                wins.append(f"w{i}")

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and leases.holder_of(conn, "t-race") == wins[0]


def test_fenced_refuses_a_lost_lease_and_blocks_a_takeover(database_url, conn) -> None:
    assert leases.acquire(conn, "t-f", "w1", 0.3)
    time.sleep(0.5)
    assert leases.acquire(conn, "t-f", "w2", 30)  # w1 paused past its expiry; w2 took over
    with pytest.raises(leases.LeaseLost), leases.fenced(conn, "t-f", "w1"):
        conn.execute("INSERT INTO leases VALUES ('t-never', 'w1', now())")
    assert conn.execute("SELECT count(*) FROM leases WHERE name = 't-never'").fetchone()[0] == 0
    # While w2's fenced transaction is open, nobody can take the lease even once it expired.
    assert leases.acquire(conn, "t-f", "w2", 0.2)
    took: list[bool] = []
    with psycopg.connect(database_url, autocommit=True) as c2, leases.fenced(conn, "t-f", "w2"):
        time.sleep(0.4)
        t = threading.Thread(target=lambda: took.append(leases.acquire(c2, "t-f", "w3", 30)))
        t.start()
        t.join(0.5)
        assert t.is_alive() and not took  # waits for w2's commit
    t.join(5)
    assert took == [True]


def test_partitioner_spreads_jobs_and_moves_a_dead_workers_share(database_url) -> None:
    jobs = [f"job{i}" for i in range(40)]
    conns = [psycopg.connect(database_url, autocommit=True) for _ in range(3)]
    try:
        parts = [leases.JobPartitioner("tp", holder=f"h{i}", ttl_s=1.0) for i in range(3)]
        for p, c in zip(parts, conns, strict=True):
            p.claim(c, jobs)  # register as members
        got = [set(p.claim(c, jobs)) for p, c in zip(parts, conns, strict=True)]
        got = [set(p.claim(c, jobs)) for p, c in zip(parts, conns, strict=True)]  # after hand-overs
        assert set().union(*got) == set(jobs)
        assert sum(len(g) for g in got) == len(jobs)  # no job twice
        assert all(5 <= len(g) <= 25 for g in got), [len(g) for g in got]
        time.sleep(1.3)  # h2 stops renewing: its membership and job leases expire
        for _ in range(2):
            got2 = [set(p.claim(c, jobs)) for p, c in zip(parts[:2], conns[:2], strict=True)]
        assert got2[0] | got2[1] == set(jobs) and not got2[0] & got2[1]
        assert got2[0] >= got[0] and got2[1] >= got[1]  # survivors keep what they had (rendezvous)
        parts[0].release_all(conns[0])
        assert leases.holder_of(conns[0], parts[0].lease_name(next(iter(got2[0])))) is None
    finally:
        for c in conns:
            c.close()
