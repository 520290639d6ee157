"""No decision may depend on how something is spelled (#15): one scenario sent twice through the real
ingest API into the real database, the second time with every device, interface, GPU and volume
renamed to random strings. Every step's attribution must be the same up to that renaming: slow or
not, layer, component (mapped), the ranked causes, confidence. The first copy uses the classic names
(`leaf1`, `spine2`, `mlx5_0`, `/mnt/ckpt`, `store1:vol0`), so a rule reading any of them shows here.

Mount points stay absolute paths (`/` + random): that is what a mount point is (the hook's
checkpoint events name it), not a naming convention of this simulator."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.simulate.faults import Fault, make_fault
from fabricscope.service.simulate.generator import Scenario, generate
from fabricscope.service.simulate.send import HttpSink, send_scenario
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.support import TestDatabase, start_service

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS = 52
# (kind, variant, start, steps): one of each layer; the checkpoint faults cover the checkpoints of steps
# 30 and 40, the second on a volume whose telemetry never arrives (only the hook's checkpoint events
# say which volume the job writes its checkpoints to: a rule reading "ckpt" in a name shows here).
PLAN = [("fabric_congestion", "leaf_down_pfc", 14, 2), ("nic_degradation", "", 18, 2),
        ("gpu_thermal_throttle", "sw_thermal", 22, 2), ("link_errors", "uplink", 26, 2),
        ("storage_slow", "ckpt", 29, 2), ("shared_volume_slow", "", 32, 3), ("host_contention", "", 36, 2),
        ("storage_slow", "ckpt", 39, 2), ("gpu_straggler", "", 43, 2), ("storage_slow", "data", 47, 2)]
UNOBSERVED = 7  # index in PLAN of the fault whose volume reports nothing
_ALNUM = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))


class Renamer:
    """A random, one-to-one renaming of device names and of interface names (a mount path stays a
    path). The same interface name on two hosts gets the same new name, as a fleet's would."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.devices: dict[str, str] = {}
        self.interfaces: dict[str, str] = {}

    def _new(self, table: dict[str, str], old: str, prefix: str = "") -> str:
        if old not in table:
            while True:
                name = prefix + "".join(self.rng.choice(_ALNUM, int(self.rng.integers(5, 12))))
                if name not in table.values():
                    break
            table[old] = name
        return table[old]

    def device(self, name: str) -> str:
        return self._new(self.devices, name)

    def interface(self, name: str) -> str:
        return self._new(self.interfaces, name, "/" if name.startswith("/") else "")

    def source(self, src: str | None) -> str | None:
        if src is None:
            return None
        dev, sep, iface = src.partition(":")
        return self.device(dev) + (sep + self.interface(iface) if sep else "")

    def body(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(body)
        if kind == "topology":
            for d in out["devices"]:
                d["name"] = self.device(d["name"])
                if "volumes" in d:
                    d["volumes"] = [self.interface(v) for v in d["volumes"]]
            for x in out["links"]:
                x["a"], x["b"] = self.source(x["a"]), self.source(x["b"])
        elif kind == "job":
            for r in out["ranks"]:
                r["host"] = self.device(r["host"])
                r["gpu"], r["nic"] = self.interface(r["gpu"]), self.interface(r["nic"])
        elif kind in ("samples", "events"):
            for x in out[kind]:
                x["source"] = self.source(x["source"])
        return out


class RenamingSink(HttpSink):
    def __init__(self, url: str, renamer: Renamer) -> None:
        super().__init__(url)
        self.r = renamer

    def put_topology(self, body: dict[str, Any]) -> None:
        super().put_topology(self.r.body("topology", body))

    def put_job(self, job: str, body: dict[str, Any]) -> None:
        super().put_job(job, self.r.body("job", body))

    def post(self, kind: str, body: dict[str, Any]) -> None:
        super().post(kind, self.r.body(kind, body))


def _scenario(job: str, t0: float) -> Scenario:
    cluster = build_cluster(SPEC)
    rng = np.random.default_rng(5)
    faults: list[Fault] = [make_fault(cluster, k, start_step=s, steps=n, severity=0.3, variant=v, rng=rng)
                           for k, v, s, n in PLAN]
    sc = generate(SPEC, job=job, steps=STEPS, faults=faults, seed=21, t0=t0)
    quiet = np.array([src == faults[UNOBSERVED].component for src in sc.streams.sources])
    sc.streams.keep[quiet, 2:] = False  # its collector reported at the start, then stopped
    return sc


def _attribute_all(conn: psycopg.Connection, job: str) -> dict[int, dict[str, Any]]:
    engine = AttributionEngine()  # a fresh one: no cache shared between the two copies
    out: dict[int, dict[str, Any]] = {}
    for s in range(STEPS):
        a = engine.attribute_step(conn, job=job, step=s, store=False)
        assert a is not None
        out[s] = dict(a)
    return out


@pytest.fixture
def own_service(fresh_database: TestDatabase, tmp_path: Path) -> Iterator[tuple[str, psycopg.Connection]]:
    """A database of this test's own: the classic names of the first copy (`leaf1:Ethernet1`) are the
    ones other suites' scenarios use, and their series (other queues, priorities) would count here."""
    svc = start_service(fresh_database.url, tmp_path)
    try:
        with psycopg.connect(fresh_database.url, autocommit=True) as conn:
            yield svc.url, conn
    finally:
        svc.stop()


def test_renaming_everything_changes_no_answer(own_service: tuple[str, psycopg.Connection]) -> None:
    service_url, db_conn = own_service
    plain = _scenario("rename-plain", 1.64e9)
    sink = HttpSink(service_url)
    try:
        send_scenario(sink, plain)
    finally:
        sink.close()
    # attributed before the renamed topology replaces the declared links
    got_plain = _attribute_all(db_conn, plain.job)

    r = Renamer(99)
    renamed = _scenario("rename-random", 1.64e9 + 2e5)
    rsink = RenamingSink(service_url, r)
    try:
        send_scenario(rsink, renamed)
    finally:
        rsink.close()
    got_renamed = _attribute_all(db_conn, renamed.job)

    layers = {a["layer"] for a in got_plain.values() if a["slow"]}
    assert {"fabric", "nic", "compute", "link", "storage", "host"} <= layers, layers  # a scenario worth comparing
    assert not any(w in n for n in [*r.devices.values(), *r.interfaces.values()] for w in ("leaf", "spine", "ckpt"))
    for s in range(STEPS):
        a, b = got_plain[s], got_renamed[s]
        assert (b["slow"], b["layer"]) == (a["slow"], a["layer"]), (s, a, b)
        assert b["component"] == r.source(a["component"]), (s, a, b)
        assert [(c["layer"], c["component"]) for c in b.get("causes", [])] == [
            (c["layer"], r.source(c["component"])) for c in a.get("causes", [])], (s, a, b)
        assert b["confidence"] == pytest.approx(a["confidence"], abs=0.02), (s, a, b)
