"""``nvidia-smi -q -x`` (XML) -> the canonical GPU samples: for ``fabricscope parse`` and for hosts
without the NVML Python bindings (the agent can run ``nvidia-smi -q -x`` instead).

Pure: text in, samples out. GPU N is the N-th ``<gpu>`` element: nvidia-smi lists GPUs in NVML index
order (PCI bus order unless CUDA_VISIBLE_DEVICES-style remapping is applied to NVML, which it is not),
so ``host:gpuN`` names the same GPU as the NVML collector and the training hook's placement.

Values are "1980 MHz", "16x", "38 C", "0 %", "N/A" or "[N/A]"; anything not a number is absent.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from collections.abc import Callable

from fabricscope.collectors.host.gpu.maps import XML_READS, XML_THROTTLE_ELEMENTS
from fabricscope.core.errors import CollectionError, ParseError
from fabricscope.core.model import Sample, now

_NUMBER = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*(?:x|MHz|W|C|%|KB/s)?\s*$")


def number(text: str | None) -> float | None:
    """The number in an nvidia-smi value ("1980 MHz", "16x", "0 %"), or None ("N/A", "Not Active")."""
    if text is None:
        return None
    m = _NUMBER.match(text)
    return float(m.group(1)) if m else None


def parse_smi_xml(text: str, ts: float, host: str) -> list[Sample]:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ParseError(f"nvidia-smi XML: {exc}") from exc
    if root.tag != "nvidia_smi_log":
        raise ParseError(f"nvidia-smi XML: root element is <{root.tag}>, expected <nvidia_smi_log>")
    out: list[Sample] = []
    for index, gpu in enumerate(root.findall("gpu")):
        out += gpu_samples(gpu, ts, f"{host}:gpu{index}")
    return out


def gpu_samples(gpu: ET.Element, ts: float, source: str) -> list[Sample]:
    series: dict[tuple[str, tuple[tuple[str, str], ...]], float] = defaultdict(float)
    for read in XML_READS:
        value = number(gpu.findtext(read.path))
        key = (read.metric, read.labels)
        # The first of several alternative elements wins for gauges (power); counters of one
        # series (sram + dram ECC) add up.
        if value is None or (key in series and not read.metric.endswith("_total")):
            continue
        series[key] += value * read.scale
    out = [Sample(ts, source, metric, value, dict(labels) or None) for (metric, labels), value in series.items()]
    reasons = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if reasons is None:
        reasons, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if reasons is not None:
        for suffix, reason in XML_THROTTLE_ELEMENTS.items():
            state = reasons.findtext(prefix + suffix)
            if state in ("Active", "Not Active"):
                out.append(Sample(ts, source, "gpu_throttle_active", 1.0 if state == "Active" else 0.0,
                                  {"reason": reason}))
    return out


# Containers that hold counts (ECC errors, retired pages, remapped rows, the driver >= 535 cumulative
# clocks-event times): a count in one of them that no XML_READS path reads is named, never dropped unsaid.
_COUNT_CONTAINER = re.compile(r"counter|error|violation|retire|remap")
_COUNT_TEXT = re.compile(r"\d{1,20}(?: [A-Za-z]+)?")


def unread_counts(text: str) -> list[str]:
    """``path (N)``: count leaves of counter containers that no mapping reads, with how many GPUs had them."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return []
    read = {r.path for r in XML_READS}
    seen: Counter[str] = Counter()
    for gpu in root.findall("gpu"):
        paths: set[str] = set()
        _walk(gpu, "", False, paths)
        seen.update(paths - read)
    return [f"{path} ({n})" for path, n in sorted(seen.items())]


def _walk(node: ET.Element, prefix: str, in_counts: bool, out: set[str]) -> None:
    for child in node:
        path = f"{prefix}/{child.tag}" if prefix else child.tag
        if len(child):
            _walk(child, path, in_counts or bool(_COUNT_CONTAINER.search(child.tag)), out)
        elif in_counts and _COUNT_TEXT.fullmatch((child.text or "").strip()):
            out.add(path)


def looks_like_smi_xml(head: str) -> bool:
    return "<nvidia_smi_log>" in head


def run_smi(binary: str, timeout_s: float) -> str:
    try:
        done = subprocess.run([binary, "-q", "-x"], capture_output=True, text=True, timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CollectionError(f"{binary} -q -x: {exc}") from exc
    return done.stdout


class SmiCollector:
    """Runs ``nvidia-smi -q -x`` each poll: GPU metrics without the NVML Python bindings (no XID
    events: nvidia-smi does not report them). ``run(binary) -> text`` is injected for tests."""

    name = "gpu"

    def __init__(self, host: str, binary: str = "nvidia-smi", *, timeout_s: float = 10.0,
                 run: Callable[[str], str] | None = None) -> None:
        self.host, self.binary = host, binary
        self.run = run or (lambda b: run_smi(b, timeout_s))

    def poll(self) -> list[Sample]:
        return parse_smi_xml(self.run(self.binary), now(), self.host)
