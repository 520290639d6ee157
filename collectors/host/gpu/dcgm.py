"""dcgm-exporter's Prometheus text -> the canonical GPU samples, and a collector that scrapes it.

For sites that already run NVIDIA's dcgm-exporter (GPU Operator): the agent reads its ``/metrics``
instead of opening NVML itself. The text is parsed with ``prometheus_client``'s parser (already a
dependency of the agent extra, and it handles escaping, HELP/TYPE and exposition quirks that a
hand-written regex would not). Field -> metric is the table ``maps.DCGM_RULES``.

GPU N is the ``gpu`` label (DCGM's GPU id, the NVML index). A MIG instance's row (label ``GPU_I_ID``)
of a per-instance field (``maps.DCGM_PER_INSTANCE``: profiling, framebuffer) is a sample of
``host:gpuN`` labelled ``mig``; of a device-wide field (clocks, power, temperature, XID, ECC...) it
repeats the GPU's value, which is kept from whatever row carries it (the device row where there is
one: a GPU in MIG mode may have none). DCGM's "blank" sentinels (no reading) are absent values, and
counted in the problems like every row that could not be placed. ``DCGM_FI_DEV_XID_ERRORS`` holds
the last XID code: a ``gpu_xid`` event when it is non-zero (``fabricscope parse``) or when it changes (the collector).
"""

from __future__ import annotations

import logging
import re
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from fabricscope.collectors.host.gpu.maps import (
    DCGM_FP64_BLANK,
    DCGM_INT64_BLANK,
    DCGM_PER_INSTANCE,
    DCGM_RULES,
    DCGM_THROTTLE_FIELDS,
    DCGM_XID_FIELD,
    throttle_reasons,
)
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Event, Sample, now

log = logging.getLogger("fabricscope.agent.gpu")


@dataclass
class DcgmReading:
    samples: list[Sample] = field(default_factory=list)
    xids: dict[str, int] = field(default_factory=dict)  # source -> last XID code (0 = none)
    unmapped: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _blank(value: float) -> bool:
    # The parser returns ints for integer text: compare as floats (every int64 sentinel, 2**63 - 16
    # up to 2**63 - 13, rounds to 2**63), or 2**63 - 14 would slip under the float threshold.
    v = float(value)
    return v != v or v >= DCGM_INT64_BLANK or v == DCGM_FP64_BLANK  # NaN, sentinels


def _resolve(name: str) -> tuple[str, float, dict[str, str]] | None:
    for rule in DCGM_RULES:
        m = rule.pattern.fullmatch(name)
        if m:
            groups = [g for g in m.groups() if g is not None]
            link = groups[0] if groups and groups[0].isdigit() else "all"  # *_TOTAL: every link
            return rule.metric, rule.scale, {k: v.replace("{1}", link) for k, v in rule.labels}
    return None


def _mig(labels: dict[str, str]) -> str | None:
    return labels.get("GPU_I_ID") or None  # some versions print GPU_I_ID="" on device rows


_Row = tuple[str, dict[str, str], float]  # field name (counter suffix removed), labels, value
_LINE = re.compile(r"^([A-Za-z_:][\w:]*)\{(.*)\}\s+(\S+)(?:\s+-?\d+)?$")
_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _rows(text: str, problems: list[str]) -> list[_Row]:
    """The exposition's rows. Strict (prometheus_client) first; where it refuses the text (a paste
    whose label sets were elided with "...", a line cut short), line by line: each row whose name,
    label pairs and value can be read is kept, the rest named in ``problems``."""
    try:
        return [(s.name.removesuffix("_total") if fam.type == "counter" else s.name, s.labels, float(s.value))
                for fam in text_string_to_metric_families(text) for s in fam.samples]
    except ValueError as exc:
        strict_error = str(exc)
    rows: list[_Row] = []
    bad: list[str] = []
    elided = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        try:
            value = float(m.group(3)) if m else None
        except ValueError:
            value = None
        if m is None or value is None:
            bad.append(line[:100])
            continue
        labels = dict(_PAIR.findall(m.group(2)))
        if _PAIR.sub("", m.group(2)).strip(" ,"):
            elided += 1
        rows.append((m.group(1), labels, value))
    if not rows:
        raise ParseError(f"dcgm-exporter metrics: {strict_error}")
    problems.append(f"not valid Prometheus text ({strict_error[:80]}): read line by line")
    problems += [f"row not readable, skipped: {b!r}" for b in bad]
    if elided:
        problems.append(f"{elided} rows with label text that is not name=\"value\" (a paste's '...'): "
                        "the labels present were read")
    return rows


def parse_dcgm(text: str, ts: float, host: str) -> DcgmReading:
    out = DcgmReading()
    rows = _rows(text, out.problems)
    # Device-wide values: from device rows first, then (only where no device row gave one) from the
    # first MIG row that carries them. Keyed by (source, field).
    device: dict[tuple[str, str], float] = {}
    from_mig: dict[tuple[str, str], float] = {}
    disagree: set[tuple[str, str]] = set()
    no_gpu, blank = 0, 0
    for name, labels, value in rows:
        gpu = labels.get("gpu")
        if gpu is None:
            no_gpu += 1
            continue
        if _blank(value):
            blank += 1
            continue
        source, mig = f"{host}:gpu{gpu}", _mig(labels)
        if mig is not None and DCGM_PER_INSTANCE.fullmatch(name):
            _emit(out, source, name, value, ts, {"mig": mig})
        elif mig is None:
            device[(source, name)] = value
        elif (source, name) not in from_mig:
            from_mig[(source, name)] = value
        elif from_mig[(source, name)] != value:
            disagree.add((source, name))
    for (source, name), value in device.items():
        _emit(out, source, name, value, ts, {})
    kept = [(key, v) for key, v in from_mig.items() if key not in device]
    for (source, name), value in kept:
        _emit(out, source, name, value, ts, {})
    if kept:
        gpus = sorted({src for (src, _), _v in kept})
        out.problems.append(f"{', '.join(gpus)}: no device-level row; {len(kept)} GPU-wide fields kept from "
                            "their MIG instances' rows")
    out.problems += [f"{src}: MIG rows disagree on the GPU-wide {name}: first kept"
                     for src, name in sorted(disagree) if (src, name) not in device]
    if no_gpu:
        out.problems.append(f"{no_gpu} rows without a gpu label skipped")
    if blank:
        out.problems.append(f"{blank} rows with DCGM's blank value (no reading): absent")
    return out


def _emit(out: DcgmReading, source: str, name: str, value: float, ts: float, extra: dict[str, str]) -> None:
    if name == DCGM_XID_FIELD:
        if not extra:  # the XID is the GPU's; a MIG row's copy is the same field
            out.xids[source] = int(value)
    elif name in DCGM_THROTTLE_FIELDS:
        out.samples += [Sample(ts, source, "gpu_throttle_active", v, {"reason": r, **extra})
                        for r, v in throttle_reasons(int(value)).items()]
    elif (res := _resolve(name)) is not None:
        metric, scale, labels = res
        out.samples.append(Sample(ts, source, metric, value * scale, {**labels, **extra} or None))
    elif name not in out.unmapped:
        out.unmapped.append(name)


def xid_event(source: str, code: int, ts: float) -> Event:
    return Event("gpu_xid", source, ts, attrs={"code": code})


def http_get(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (URL from the agent config)
            body: bytes = resp.read()
    except OSError as exc:  # URLError, timeouts and refusals are OSErrors
        raise CollectionError(f"dcgm-exporter {url}: {exc}") from exc
    return body.decode("utf-8", errors="replace")


class DcgmCollector:
    """Scrapes a dcgm-exporter each poll. ``fetch(url) -> text`` is injected (tests, other transports)."""

    name = "gpu"

    def __init__(self, host: str, url: str, *, timeout_s: float = 5.0,
                 fetch: Callable[[str], str] | None = None,
                 emit: Callable[[Event], None] | None = None) -> None:
        self.host, self.url = host, url
        self.fetch = fetch or (lambda u: http_get(u, timeout_s))
        self.emit = emit or (lambda _e: None)
        self._last_xid: dict[str, int] = {}

    def poll(self) -> list[Sample]:
        ts = now()
        reading = parse_dcgm(self.fetch(self.url), ts, self.host)
        report_problems(self.host, "dcgm-exporter", reading.problems, log)
        for source, code in reading.xids.items():
            # The field keeps the last XID until the next one: only a change is a new event (a
            # repeat of the same code is invisible here; NVML's event set sees each one). The
            # first scrape only seeds: an XID from before the agent started is not "now".
            if source in self._last_xid and code and self._last_xid[source] != code:
                self.emit(xid_event(source, code, ts))
            self._last_xid[source] = code
        return reading.samples


def looks_like_dcgm(head: str) -> bool:
    return "DCGM_FI_" in head and "{" in head
