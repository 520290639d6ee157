"""``fabricscope agent``: runs the host collectors on their intervals and ships samples and events.

One thread, deadline scheduling (a slow poll delays the next one of that collector instead of
piling up), each collector's failure logged and counted without stopping the others. Samples go
through the sink the config's URL names (``collectors.sinks.factory.make_sink``: the ingest API,
NATS, or the database when the config names a DSN; bounded queue, on-disk spool during an outage,
replayed in order). Events (pfc_storm, ecn_burst, link_flap) are derived here from the NIC/RDMA
counters, so they exist even if the central service was down when they happened.
"""

from __future__ import annotations

import importlib
import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from fabricscope.collectors import selfmetrics
from fabricscope.collectors.events import EventDetector
from fabricscope.collectors.host.config import AgentConfig, SinkConfig, load_config
from fabricscope.collectors.host.ethtool_ioctl import EthtoolIoctl
from fabricscope.collectors.host.gpu import make_gpu_collector
from fabricscope.collectors.host.nccl_ras_client import NcclRasCollector
from fabricscope.collectors.host.nic import EthtoolSource, NicCollector, SubprocessEthtool
from fabricscope.collectors.host.pressure import PressureCollector, cgroup2_root
from fabricscope.collectors.host.rdma import RdmaCollector
from fabricscope.collectors.host.storage import StorageCollector
from fabricscope.collectors.host.tcp import TcpCollector
from fabricscope.collectors.selfmetrics import observe_poll
from fabricscope.collectors.sinks.factory import Sink, make_sink
from fabricscope.core.errors import ConfigError, FabricscopeError
from fabricscope.core.model import Collector, Event, Sample, now

log = logging.getLogger("fabricscope.agent")
# The NCCL Inspector tail reads training records with the importer's parser, so it lives with the
# importers; the training package already imports the host's (PCIe placement), so the agent loads it by
# name, as formats/ and sinks/factory.py load theirs, instead of a second package edge the other way.
INSPECTOR_MODULE = "fabricscope.collectors.training.importers.inspector_live"


def sink_from_config(cfg: SinkConfig) -> Sink:
    """The sink the config names: sink.url (http(s):// or nats://) or sink.dsn (postgresql://)."""
    target = cfg.dsn if cfg.dsn is not None else cfg.url
    assert target is not None  # parse_config guarantees exactly one of url/dsn
    return make_sink(target, token=cfg.token, spool_path=cfg.spool_path, spool_max_bytes=cfg.spool_max_bytes,
                     batch_max=cfg.batch_max, flush_interval_s=cfg.flush_interval_s)


def make_ethtool(mode: str, binary: str) -> EthtoolSource | None:
    if mode == "subprocess":
        return SubprocessEthtool(binary)
    if mode == "ioctl":
        return EthtoolIoctl()
    return None


class Agent:
    def __init__(self, cfg: AgentConfig, sink: Sink, *, ethtool: EthtoolSource | None = None,
                 clock: Callable[[], float] = time.monotonic, nvml_lib: Any = None) -> None:
        self.cfg, self.sink, self.clock = cfg, sink, clock
        self.detector = EventDetector(cfg.events)
        self.stats = {"polls": 0, "samples": 0, "events": 0, "errors": 0, "not_queued": 0}
        self.tasks: list[tuple[float, Collector]] = []
        if cfg.nic.enabled:
            eth = ethtool if ethtool is not None else make_ethtool(cfg.nic.ethtool, cfg.nic.ethtool_binary)
            self.tasks.append((cfg.nic.interval_s, NicCollector(
                cfg.host, sys_root=cfg.sys_root, include=cfg.nic.include, exclude=cfg.nic.exclude,
                ethtool=eth, extras=cfg.nic.extras,
                extras_every=round(cfg.nic.extras_interval_s / cfg.nic.interval_s))))
        if cfg.rdma.enabled:
            self.tasks.append((cfg.rdma.interval_s or cfg.nic.interval_s, RdmaCollector(
                cfg.host, sys_root=cfg.sys_root, include=cfg.rdma.include, exclude=cfg.rdma.exclude)))
        if cfg.storage.enabled:
            self.tasks.append((cfg.storage.interval_s, StorageCollector(
                cfg.host, proc_root=cfg.proc_root, sys_root=cfg.sys_root,
                disks_include=cfg.storage.disks_include, disks_exclude=cfg.storage.disks_exclude,
                volumes=cfg.storage.volumes)))
        if cfg.gpu.enabled:  # GPUs (#17): None where NVML is absent or has no driver (logged there)
            gpu = make_gpu_collector(cfg.host, cfg.gpu.source, cfg.gpu.dcgm_url, timeout_s=cfg.gpu.dcgm_timeout_s,
                                     emit=self._emit_event, lib=nvml_lib, smi_binary=cfg.gpu.smi_binary)
            if gpu is not None:
                self.tasks.append((cfg.gpu.interval_s, gpu))
        # -- host pressure and TCP (#17) --
        if cfg.tcp.enabled:
            self.tasks.append((cfg.tcp.interval_s, TcpCollector(cfg.host, proc_root=cfg.proc_root,
                                                                softnet=cfg.tcp.softnet)))
        if cfg.pressure.enabled:
            p = cfg.pressure
            self.tasks.append((p.interval_s, PressureCollector(
                cfg.host, proc_root=cfg.proc_root, cgroups=p.cgroups,
                cgroup_root=Path(p.cgroup_root) if p.cgroup_root else cgroup2_root(cfg.proc_root, cfg.sys_root),
                thermal_root=cfg.sys_root if p.thermal else None,
                thermal_every=max(1, round(p.thermal_interval_s / p.interval_s)))))
        if cfg.nccl_inspector.enabled:  # NCCL Inspector live (#45): collectives of jobs without the hook
            self.tasks.append((cfg.nccl_inspector.interval_s, self._inspector_tail()))
        if cfg.nccl_ras.enabled:  # NCCL RAS (#45 item 4): which ranks NCCL itself finds dead or silent
            self.tasks.append((cfg.nccl_ras.interval_s, NcclRasCollector(cfg.host, cfg.nccl_ras, self._emit_event)))

    def _inspector_tail(self) -> Collector:
        c = self.cfg.nccl_inspector
        state = Path(c.state_path) if c.state_path else None
        if state is None and self.cfg.sink.spool_path is not None:
            state = self.cfg.sink.spool_path.with_name(self.cfg.sink.spool_path.name + ".inspector-offsets.json")
        if state is None:
            log.warning("agent %s: nccl_inspector: no state_path and no sink.spool_path: offsets are kept in "
                        "memory only, so a restarted agent sends every Inspector file again from its start",
                        self.cfg.host)
        tail: Collector = importlib.import_module(INSPECTOR_MODULE).InspectorTail(self.cfg.host, c, self.sink,
                                                                                  state_path=state)
        return tail

    def run_collector(self, collector: Collector) -> list[Sample]:
        """One poll: samples and derived events go to the sink. Failures are logged, not raised."""
        self.stats["polls"] += 1
        t0 = time.monotonic()
        try:
            samples = collector.poll()
        except (FabricscopeError, OSError) as exc:
            self.stats["errors"] += 1
            log.warning("agent %s: %s poll failed: %s", self.cfg.host, collector.name, exc)
            observe_poll(f"{self.cfg.host}:{collector.name}", ok=False, seconds=time.monotonic() - t0)
            return []
        observe_poll(f"{self.cfg.host}:{collector.name}", ok=True, seconds=time.monotonic() - t0,
                     samples=len(samples))
        events = self.detector.feed(samples) if collector.name in ("nic", "rdma") else []
        submit, refused = self.sink.submit, 0  # bound once: ~500 samples a second go through here
        for s in samples:
            if not submit("samples", s.to_json()):
                refused += 1
        self.stats["not_queued"] += refused
        for e in events:
            log.info("agent %s: %s on %s", self.cfg.host, e.kind, e.source)
            self._submit("events", e.to_json())
        self.stats["samples"] += len(samples)
        self.stats["events"] += len(events)
        return samples

    def _emit_event(self, event: Event) -> None:
        """Events a collector finds itself (GPU XIDs), as they come, outside the derived ones."""
        self.stats["events"] += 1
        self._submit("events", event.to_json())

    def _submit(self, kind: str, item: dict[str, Any]) -> None:
        if not self.sink.submit(kind, item):
            self.stats["not_queued"] += 1

    def self_samples(self) -> list[Sample]:
        """The agent's own cost, so "the agent is too heavy" is a query, not a guess."""
        src, ts = f"{self.cfg.host}:fabricscope-agent", now()
        out = [Sample(ts, src, "agent_cpu_seconds_total", time.process_time())]
        out += [Sample(ts, src, f"agent_{k}_total", float(v)) for k, v in self.stats.items()]
        return out

    def run_once(self) -> None:
        for _, collector in self.tasks:
            self.run_collector(collector)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set; then close open episodes and flush."""
        start = self.clock()
        due = [start] * len(self.tasks)
        next_self = start
        while not stop.is_set():
            t = self.clock()
            for i, (interval, collector) in enumerate(self.tasks):
                if t >= due[i]:
                    self.run_collector(collector)
                    # Next slot on the grid; skip missed slots instead of bursting to catch up.
                    due[i] += interval * max(1, int((self.clock() - due[i]) // interval) + 1)
            if t >= next_self:
                for s in self.self_samples():
                    self._submit("samples", s.to_json())
                next_self += 60.0
            stop.wait(max(0.0, min(due, default=t + 1.0) - self.clock()))
        for e in self.detector.close(now()):
            self._submit("events", e.to_json())


def agent_command(
    config: Path = typer.Option(..., "--config", "-c", help="Agent YAML config (see agent.example.yaml)."),
    once: bool = typer.Option(False, "--once", help="Poll every collector once, flush and exit."),
    log_level: str = typer.Option("info", "--log-level", help="debug, info, warning or error."),
    metrics_port: int | None = typer.Option(None, "--metrics-port",
                                            help="Serve Prometheus self-metrics on 127.0.0.1:PORT."),
) -> None:
    """Run the host agent: NIC, RDMA/InfiniBand and storage collectors, pause/ECN/flap events."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    selfmetrics.serve(metrics_port)
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    sink = sink_from_config(cfg.sink)
    selfmetrics.watch_sink("agent", lambda: sink.stats)
    agent = Agent(cfg, sink)
    try:
        if once:
            agent.run_once()
            ok = sink.flush(30.0)
            typer.echo(f"{agent.stats['samples']} samples, {agent.stats['events']} events, "
                       f"{'delivered' if ok else 'NOT all delivered (spooled or dropped)'}")
            if not ok:
                raise typer.Exit(1)
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        log.info("agent %s: %d collectors, sink %r", cfg.host, len(agent.tasks), sink)
        agent.run(stop)
        sink.flush(10.0)
    finally:
        sink.close()
