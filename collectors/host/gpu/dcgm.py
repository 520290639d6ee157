"""dcgm-exporter's Prometheus text -> the canonical GPU samples, and a collector that scrapes it.

For sites that already run NVIDIA's dcgm-exporter (GPU Operator): the agent reads its ``/metrics``
instead of opening NVML itself. The text is parsed with ``prometheus_client``'s parser (already a
dependency of the agent extra, and it handles escaping, HELP/TYPE and exposition quirks that a
hand-written regex would not). Field -> metric is the table ``maps.DCGM_RULES``.

GPU N is the ``gpu`` label (DCGM's GPU id, the NVML index). Rows of MIG instances (label
``GPU_I_ID``) repeat device-wide fields per instance and are skipped. DCGM's "blank" sentinels
(no reading) are absent values. ``DCGM_FI_DEV_XID_ERRORS`` holds the last XID code: a ``gpu_xid``
event when it is non-zero (``fabricscope parse``) or when it changes (the collector).
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from fabricscope.collectors.host.gpu.maps import (
    DCGM_FP64_BLANK,
    DCGM_INT64_BLANK,
    DCGM_RULES,
    DCGM_THROTTLE_FIELDS,
    DCGM_XID_FIELD,
    throttle_reasons,
)
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Event, Sample, now

log = logging.getLogger("fabricscope.agent.gpu")


@dataclass
class DcgmReading:
    samples: list[Sample] = field(default_factory=list)
    xids: dict[str, int] = field(default_factory=dict)  # source -> last XID code (0 = none)
    unmapped: list[str] = field(default_factory=list)


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


def parse_dcgm(text: str, ts: float, host: str) -> DcgmReading:
    out = DcgmReading()
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise ParseError(f"dcgm-exporter metrics: {exc}") from exc
    for fam in families:
        for s in fam.samples:
            gpu = s.labels.get("gpu")
            if gpu is None or "GPU_I_ID" in s.labels or _blank(s.value):
                continue
            source = f"{host}:gpu{gpu}"
            # The parser names a counter's samples <name>_total; DCGM fields are upper case.
            name = s.name.removesuffix("_total") if fam.type == "counter" else s.name
            if name == DCGM_XID_FIELD:
                out.xids[source] = int(s.value)
            elif name in DCGM_THROTTLE_FIELDS:
                out.samples += [Sample(ts, source, "gpu_throttle_active", v, {"reason": r})
                                for r, v in throttle_reasons(int(s.value)).items()]
            elif (res := _resolve(name)) is not None:
                metric, scale, labels = res
                out.samples.append(Sample(ts, source, metric, float(s.value) * scale, labels or None))
            elif name not in out.unmapped:
                out.unmapped.append(name)
    return out


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
