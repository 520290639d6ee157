"""``python -m tests.lab run``: the fabric, its collectors, a real training job, faults, and the verdict.

Order: fabric up (kernel.py) -> daemons in the namespaces (snmpd + lldpd per switch, lldpd per
host) -> the API (given, or a ``fabricscope serve`` started here) -> the management relay ->
collectors (a switch agent per switch namespace, the host agent per host namespace, the storage
system's agent for the shared dataset volume) -> topology
(declared from the lab's wiring, then LLDP links merged in and compared) -> 4 gloo ranks -> warm-up,
then each fault with a recovery gap -> stop, score, table. Teardown always runs (``finally`` plus
SIGTERM/SIGINT/SIGHUP turned into an exception), and ``kernel.down`` finds what to remove by prefix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.lab import faults as F
from tests.lab import kernel, volumes
from tests.lab.evaluate import FaultResult, History, Window, evaluate, table
from tests.lab.spec import LabSpec
from tests.lab.stored import StoredWatcher

log = logging.getLogger("fabricscope.lab")
REPO = Path(__file__).resolve().parents[2]
SNMP_PORT = 1161
COMMUNITY_ENV = "FSLAB_SNMP_COMMUNITY"
# veth carries GSO super-packets (kernel.py says why GSO stays on); the switch collector counts the
# packets its nftables rules mark or drop as 1500-byte-MTU wire frames, as a switch ASIC would.
WIRE_FRAME_BYTES = 1514


class Interrupted(Exception):
    pass


def _raise(signum: int, _frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Options:
    faults: list[str] = field(default_factory=lambda: list(F.FAULTS))
    warmup_s: float = 25.0
    gap_s: float = 12.0
    grace_s: float = 4.0
    url: str | None = None
    database_url: str | None = None
    job: str = "lab-train"
    log_dir: Path | None = None
    ckpt_every: int = 5
    width: int = 1024
    data_kb: int = 512  # read from the shared dataset volume by each rank in each step's data phase
    keep: bool = False
    # "ask": the lab asks for each slow step's answer 3 s after its end (on demand, its own 2 s
    # poll); "stored": the service started here runs its attribution worker (interval 5 s, and on
    # arrival unless on_arrival is off) and the lab only watches what it stores (tests/lab/stored.py)
    answers: str = "ask"
    on_arrival: bool = True


@dataclass
class LabResult:
    results: list[FaultResult]
    outside_slow: list[int]
    steps: int
    lldp_links: list[tuple[str, str]]
    lldp_matches_wiring: bool
    table: str
    wall_s: float


class Lab:
    def __init__(self, spec: LabSpec, opts: Options) -> None:
        self.spec, self.opts = spec, opts
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.log_dir = opts.log_dir or (spec.run_dir / "logs")
        self.url = opts.url or ""
        self.relay_port = free_port()
        self.community = os.urandom(8).hex()
        self.first_seen: dict[int, float] = {}
        self.stored: History | None = None
        self.attributions: dict[int, dict[str, Any]] = {}
        self._stop_poll = threading.Event()
        self.dsn = opts.database_url

    # -- processes -----------------------------------------------------------------------------
    def _env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_")}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(extra)
        return env

    def spawn(self, name: str, cmd: list[str], *, ns: str | None = None, env: dict[str, str] | None = None,
              host_cgroups: str | None = None) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        full = (["ip", "netns", "exec", ns] if ns else []) + cmd
        out = (self.log_dir / f"{name}.log").open("ab")
        pre = (lambda: kernel.enter_cgroups(self.spec, host_cgroups)) if host_cgroups else None
        p = subprocess.Popen(full, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env or self._env(),
                             preexec_fn=pre, start_new_session=True)
        kernel.record_pid(self.spec, p.pid)
        self.procs[name] = p
        return p

    def check_alive(self, names: list[str] | None = None) -> None:
        for n, p in self.procs.items():
            if (names is None or n in names) and p.poll() is not None and not n.startswith("rank"):
                raise kernel.LabError(f"{n} exited with {p.returncode}; log: {self.log_dir / (n + '.log')}\n"
                                      + self.tail(n))

    def tail(self, name: str, n: int = 15) -> str:
        f = self.log_dir / f"{name}.log"
        return "\n".join(f.read_text(errors="replace").splitlines()[-n:]) if f.exists() else ""

    # -- bring-up ------------------------------------------------------------------------------
    def start_daemons(self) -> None:
        for dev in self.spec.switches + self.spec.hosts:
            d = self.spec.run_dir / dev
            d.mkdir(parents=True, exist_ok=True)
            ns = self.spec.ns(dev)
            lldp = ["lldpd", "-d", "-u", str(d / "lldpd.sock"), "-I", "swp*" if dev in self.spec.switches else "eth0"]
            if dev in self.spec.switches:
                (d / "snmp").mkdir(exist_ok=True)
                conf = d / "snmpd.conf"
                conf.write_text(f"agentAddress udp:127.0.0.1:{SNMP_PORT}\nrocommunity {self.community} 127.0.0.1\n"
                                f"master agentx\nagentXSocket unix:{d / 'agentx.sock'}\n")
                conf.chmod(0o600)
                self.spawn(f"snmpd-{dev}", ["snmpd", "-f", "-Lo", "-C", "-c", str(conf), "-p", str(d / "snmpd.pid")],
                           ns=ns, env=self._env(SNMP_PERSISTENT_DIR=str(d / "snmp")))
                lldp += ["-x", "-X", f"unix:{d / 'agentx.sock'}"]
            self.spawn(f"lldpd-{dev}", lldp, ns=ns)
        time.sleep(1.0)
        for dev in self.spec.switches + self.spec.hosts:
            sock = str(self.spec.run_dir / dev / "lldpd.sock")
            for words in (["configure", "system", "hostname", dev], ["configure", "lldp", "portidsubtype", "ifname"],
                          ["configure", "lldp", "tx-interval", "1"]):
                kernel.sh("lldpcli", "-u", sock, *words, ns=self.spec.ns(dev), check=False)

    def start_service(self) -> None:
        if self.url:
            return
        port = free_port()
        env = self._env(FABRICSCOPE_CORRELATE_INTERVAL_S="0", FABRICSCOPE_ALERT_INTERVAL_S="0",
                        FABRICSCOPE_RETENTION_INTERVAL_S="0")
        if self.opts.answers == "stored":  # the service's own answers, as a deployment runs it
            env.update(FABRICSCOPE_CORRELATE_INTERVAL_S="5",
                       FABRICSCOPE_CORRELATE_ON_ARRIVAL="true" if self.opts.on_arrival else "false")
        if self.opts.database_url:
            env["DATABASE_URL"] = self.opts.database_url
        else:  # an embedded PostgreSQL of the lab's own, gone with the lab
            from fabricscope.service.db.embedded import EmbeddedPostgres

            emb = EmbeddedPostgres(self.spec.run_dir / "db", free_port())
            env.update(FABRICSCOPE_EMBEDDED_PORT=str(emb.port), FABRICSCOPE_DATA_DIR=str(emb.data_dir))
            self.dsn = emb.url
        self.spawn("service", [sys.executable, "-m", "fabricscope", "serve", "--host", "127.0.0.1", "--port",
                               str(port)], env=env)
        self.url = f"http://127.0.0.1:{port}"
        self._wait(lambda: httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200, 90, "service")

    def _wait(self, ok: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError, OSError):
                if ok():
                    return
            time.sleep(0.3)
        raise kernel.LabError(f"{what} not ready in {timeout:.0f}s")

    def start_collectors(self) -> None:
        target = self.url.removeprefix("http://").rstrip("/")
        self.spawn("relay", [sys.executable, "-m", "tests.lab.relay", "--target", target, "--port",
                             str(self.relay_port)] + self.spec.namespaces)
        local = f"http://127.0.0.1:{self.relay_port}"
        self._wait(lambda: "relay ready" in self.tail("relay"), 30, "relay")
        for sw in self.spec.switches:
            self.spawn(f"collector-{sw}", [sys.executable, "-m", "tests.lab.switch_agent", "--switch", sw,
                                           "--url", local, "--snmp-port", str(SNMP_PORT),
                                           "--wire-frame-bytes", str(WIRE_FRAME_BYTES)],
                       ns=self.spec.ns(sw), env=self._env(**{COMMUNITY_ENV: self.community}))
        for h in self.spec.hosts:
            conf = self.spec.run_dir / h / "agent.yaml"
            loop = kernel.sh("findmnt", "-n", "-o", "SOURCE", str(volumes.volume_dir(self.spec, h))).strip()
            conf.write_text(json.dumps({
                "host": h, "sink": {"url": local, "spool_path": str(self.spec.run_dir / h / "agent.spool"),
                                    "flush_interval_s": 0.5},
                "nic": {"interval_s": 1, "include": ["eth0"], "exclude": [], "ethtool": "ioctl", "extras": False},
                "rdma": {"enabled": False},
                "storage": {"interval_s": 1, "disks_include": [Path(loop).name], "disks_exclude": [],
                            "volumes": [str(volumes.volume_dir(self.spec, h))]},
            }))
            self.spawn(f"agent-{h}", [sys.executable, "-m", "fabricscope", "agent", "--config", str(conf)],
                       ns=self.spec.ns(h))
        # the storage system's collector, outside the fabric like the storage system itself: the shared
        # dataset volume's diskstats under the source the topology declares for it
        _, vol = volumes.dataset_devices(self.spec)
        self.spawn("storage-agent", [sys.executable, "-m", "tests.lab.storage_agent", "--source",
                                     self.spec.dataset_source, "--disk", Path(vol).name, "--url", self.url])

    def register_topology(self) -> tuple[list[tuple[str, str]], bool]:
        """Declared topology from the wiring; then wait (up to 20 s) for LLDP to discover every
        link and compare. Discovered links are merged by the server either way."""
        r = httpx.put(f"{self.url}/v1/topology", json=self.spec.topology_body(), timeout=30)
        r.raise_for_status()
        want = {tuple(sorted((w.a, w.b))) for w in self.spec.wires}
        found: set[tuple[str, ...]] = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not want <= found:
            topo = httpx.get(f"{self.url}/v1/topology", timeout=10).json()
            found = {tuple(sorted((link["a"], link["b"]))) for link in topo.get("links", []) if link.get("discovered")}
            time.sleep(1)
        return sorted((a, b) for a, b in found), want <= found

    def start_job(self) -> None:
        master = self.spec.ip(self.spec.hosts[0])
        port = str(29500 + os.getpid() % 1000)
        for rank, h in enumerate(self.spec.hosts):
            env = self._env(RANK=str(rank), WORLD_SIZE=str(len(self.spec.hosts)), MASTER_ADDR=master,
                            MASTER_PORT=port, GLOO_SOCKET_IFNAME="eth0", FABRICSCOPE_URL=f"http://127.0.0.1:{self.relay_port}",
                            FABRICSCOPE_JOB=self.opts.job, FABRICSCOPE_HOST=h, FABRICSCOPE_NIC="eth0",
                            FABRICSCOPE_SPOOL=str(self.spec.run_dir / h / "spool"),
                            FSLAB_CKPT_DIR=str(volumes.volume_dir(self.spec, h)), FSLAB_STOP=str(self.stop_file),
                            FSLAB_CKPT_EVERY=str(self.opts.ckpt_every), FSLAB_WIDTH=str(self.opts.width),
                            FSLAB_DATA_FILE=str(volumes.shard_path(self.spec, h)),
                            FSLAB_DATA_KB=str(self.opts.data_kb),
                            OMP_NUM_THREADS="1")
            self.spawn(f"rank{rank}", [sys.executable, "-m", "tests.lab.train"], ns=self.spec.ns(h), env=env,
                       host_cgroups=h)

    @property
    def stop_file(self) -> Path:
        return self.spec.run_dir / "stop"

    # -- answers ---------------------------------------------------------------------------------
    def steps(self) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.url}/v1/jobs/{self.opts.job}/steps", timeout=60)
        if r.status_code == 404:
            return []
        r.raise_for_status()
        out = r.json()
        for s in out:
            s["t0"] = _epoch(s["start"])
        return out

    def attribute(self, step: int) -> dict[str, Any]:
        r = httpx.get(f"{self.url}/v1/jobs/{self.opts.job}/steps/{step}/attribution", timeout=60)
        r.raise_for_status()
        return dict(r.json())

    def _poll_answers(self) -> None:
        """While the job runs: attribute each slow step once its telemetry is in (3 s after its end),
        and note when that answer was first available (time to first attribution)."""
        while not self._stop_poll.wait(2.0):
            try:
                now = time.time()
                for s in self.steps():
                    if s["slow"] and s["step"] not in self.first_seen and s["t0"] + s["duration_s"] < now - 3.0:
                        self.attributions[s["step"]] = self.attribute(s["step"])
                        self.first_seen[s["step"]] = time.time()
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                log.warning("lab: answer poll: %s", exc)

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> LabResult:
        t_start = time.monotonic()
        kernel.up(self.spec)
        self.start_daemons()
        self.start_service()
        self.start_collectors()
        lldp, lldp_ok = self.register_topology()
        log.info("lab: LLDP found %d links (all of the wiring: %s)", len(lldp), lldp_ok)
        self.start_job()
        self._wait(lambda: len(self.steps()) >= 3, 180, "training job (first steps)")
        for h in self.spec.hosts:
            log.info("lab: %s cgroup cpu procs: %s", h,
                     (kernel.cgroup(self.spec, "cpu", h) / "cgroup.procs").read_text().split())
        watcher = None
        if self.opts.answers == "stored":
            if not self.dsn:
                raise kernel.LabError("--answers stored reads the service's database: give --database-url")
            watcher = StoredWatcher(self.dsn, self.opts.job)
            watcher.start()
        # with the watcher the lab asks nothing while the job runs (a GET attributes and stores)
        poller = threading.Thread(target=self._poll_answers if watcher is None else lambda: None, daemon=True)
        poller.start()
        self._sleep(self.opts.warmup_s)
        # false alarms count from 10 s before the first fault: the first seconds of a job (and of
        # the collectors' load on 2 cores) are where the baseline forms, not a healthy steady state
        judged_from = time.time() - min(10.0, self.opts.warmup_s / 2)
        windows = []
        for name in self.opts.faults:
            f = F.FAULTS[name]
            log.info("lab: fault %s: %s", name, f.what)
            t0 = time.time()
            f.inject(self.spec)
            self._sleep(max(f.duration_s - (time.time() - t0), 0.0))
            f.clear(self.spec)
            t1 = time.time()
            windows.append(Window(name, f.what, t0, t1, (f.layer,) + f.alt_layers, f.component(self.spec)))
            self._sleep(self.opts.gap_s)
        self.stop_file.touch()
        self._wait_ranks(90)
        time.sleep(4.0)  # the last telemetry and step records arrive
        self._stop_poll.set()
        poller.join(10)
        if watcher is not None:
            self.stored = watcher.stop()  # before the final answers below, which are asked (and stored)
        steps = self.steps()
        for s in steps:  # final answers for every slow step (the same engine, all data in)
            if s["slow"]:
                self.attributions[s["step"]] = self.attribute(s["step"])
                self.first_seen.setdefault(s["step"], time.time())
        self._dump(steps, windows)
        results, outside = evaluate(steps, self.attributions, windows, self.first_seen, grace_s=self.opts.grace_s,
                                    judged_from=judged_from, stored=self.stored)
        return LabResult(results, outside, len(steps), lldp, lldp_ok, table(results), time.monotonic() - t_start)

    def _dump(self, steps: list[dict[str, Any]], windows: list[Window]) -> None:
        """Steps, answers and fault windows next to the logs, for a look after the lab is gone."""
        if self.opts.log_dir is None:
            return
        self.log_dir.mkdir(parents=True, exist_ok=True)
        (self.log_dir / "steps.json").write_text(json.dumps(steps))
        (self.log_dir / "attributions.json").write_text(json.dumps(self.attributions))
        (self.log_dir / "windows.json").write_text(json.dumps([w.__dict__ for w in windows]))
        if self.stored is not None:  # --answers stored: each step's stored answers as the lab saw them
            (self.log_dir / "stored.json").write_text(json.dumps(self.stored))
        series: dict[str, Any] = {}
        for w in windows:
            if ":" not in w.component or w.component.count("/"):
                continue
            for m in ("ecn_marked_packets_total", "tx_discards_total", "rx_fcs_errors_total", "link_down_total",
                      "read_latency_seconds", "read_ops_total"):
                with contextlib.suppress(httpx.HTTPError, ValueError):
                    r = httpx.get(f"{self.url}/v1/sources/{w.component}/metrics/{m}",
                                  params={"from": w.start - 10, "to": w.end + 10}, timeout=30)
                    series[f"{w.fault} {w.component} {m}"] = r.json() if r.status_code == 200 else r.text[:200]
        (self.log_dir / "series.json").write_text(json.dumps(series))
        if self.dsn:  # per-rank rows of the steps the engine could not explain
            import psycopg

            odd = [int(k) for k, v in self.attributions.items() if v.get("layer") == "unknown"]
            rows: list[Any] = []
            coll: list[Any] = []
            with contextlib.suppress(psycopg.Error), psycopg.connect(self.dsn) as conn:
                rows = conn.execute("SELECT step, rank, duration_s, phases::text FROM steps WHERE job = %s AND "
                                    "step = ANY(%s) ORDER BY step, rank", (self.opts.job, odd)).fetchall()
                coll = conn.execute("SELECT step, rank, seq, op, duration_s FROM collectives WHERE job = %s AND "
                                    "step = ANY(%s) ORDER BY step, seq, rank", (self.opts.job, odd)).fetchall()
            (self.log_dir / "unknown_steps.json").write_text(json.dumps({"steps": rows, "collectives": coll},
                                                                        default=str))
            with contextlib.suppress(psycopg.Error), psycopg.connect(self.dsn) as conn:  # every rank's phases
                every = conn.execute("SELECT step, rank, duration_s, phases::text FROM steps WHERE job = %s "
                                     "ORDER BY step, rank", (self.opts.job,)).fetchall()
                (self.log_dir / "rank_steps.json").write_text(json.dumps(every, default=str))

    def _sleep(self, s: float) -> None:
        deadline = time.monotonic() + s
        while time.monotonic() < deadline:
            self.check_alive()
            ranks = [p for n, p in self.procs.items() if n.startswith("rank")]
            if any(p.poll() not in (None, 0) for p in ranks):
                bad = next(n for n, p in self.procs.items() if n.startswith("rank") and p.poll() not in (None, 0))
                raise kernel.LabError(f"{bad} failed:\n{self.tail(bad)}")
            time.sleep(min(0.25, max(deadline - time.monotonic(), 0)))

    def _wait_ranks(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for n, p in self.procs.items():
            if n.startswith("rank"):
                try:
                    p.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired as exc:
                    raise kernel.LabError(f"{n} did not stop:\n{self.tail(n)}") from exc
                if p.returncode:
                    raise kernel.LabError(f"{n} exited with {p.returncode}:\n{self.tail(n)}")

    def close(self) -> list[str]:
        self._stop_poll.set()
        F.clear_all(self.spec)
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.terminate()
        for p in self.procs.values():
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if self.opts.log_dir is None and not self.opts.keep:
            pass  # logs lived in run_dir and go with it
        return [] if self.opts.keep else kernel.down(self.spec)


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


def run_lab(spec: LabSpec, opts: Options) -> tuple[LabResult | None, list[str]]:
    """Run everything; always tear down. Returns the result and what teardown left behind."""
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    for s in old:
        signal.signal(s, _raise)
    lab = Lab(spec, opts)
    try:
        return lab.run(), lab.close()
    except BaseException:
        left = lab.close()
        if left:
            log.error("lab: teardown left %s", left)
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)
