"""``fabricscope parse`` formats of the training importers: ``nccl-tests`` (stdout of nccl-tests and
rccl-tests), ``nccl-tests-json`` (its ``-J`` report) and ``nccl-inspector`` (Inspector plugin dumps).

What they read is shown as samples and events so a user sees it before importing: each table row
is three samples of the ``--device`` source (``nccl_test_time_us``, ``nccl_test_algbw_gbps``,
``nccl_test_busbw_gbps``) labelled with its op, size, placement and type; each Inspector record is
one ``collective`` event (start and end, its fields as attributes, labels kept). Whatever the
importer would skip is in ``problems``: the same lines ``fabricscope import`` reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.model import Event, Sample

from . import nccl_inspector
from .nccl_tests import ParsedRun, parse

_ROW_METRICS = (("time_us", "nccl_test_time_us"), ("algbw_gbps", "nccl_test_algbw_gbps"),
                ("busbw_gbps", "nccl_test_busbw_gbps"))


def _run_samples(run: ParsedRun, device: str, ts: float) -> list[Sample]:
    when = run["started_at"] if run["started_at"] is not None else ts
    out: list[Sample] = []
    for row in run["rows"]:
        labels = {"op": run["op"] or "?", "size_bytes": str(row["size_bytes"]), "placement": row["placement"],
                  "type": row["type"]}
        labels |= {k: str(row[k]) for k in ("redop", "root") if row[k] is not None}
        if run["ranks"] is not None:
            labels["ranks"] = str(run["ranks"])
        out.extend(Sample(when, device, metric, float(row[key]), labels)  # type: ignore[literal-required]
                   for key, metric in _ROW_METRICS)
    return out


def read_nccl_tests(path: Path, device: str, ts: float) -> Reading:
    runs = parse(path.read_text(encoding="utf-8", errors="replace"), source=path.name)
    out = Reading()
    for i, run in enumerate(runs, 1):
        out.samples.extend(_run_samples(run, device, ts))
        where = f"run {i}: " if len(runs) > 1 else ""
        out.problems.extend(where + p for p in run["problems"])
    return out


def read_inspector(path: Path, device: str, _ts: float) -> Reading:
    got = nccl_inspector.read(path.read_text(encoding="utf-8", errors="replace"), path.name)
    out = Reading(problems=list(got.problems), unmapped=sorted(got.unknown))
    for c in got.collectives:
        attrs: dict[str, Any] = {k: v for k, v in c.items() if k not in ("start", "end")}
        host = got.hosts.get(c["rank"], device)
        out.events.append(Event("collective", f"{host}:rank{c['rank']}", c["start"], c["end"], attrs=attrs))
    return out


def _sniff_text(_path: Path, head: str) -> bool:
    return ("# nThread" in head or "nccl-tests version" in head or "rccl-tests: Version" in head
            or ("algbw" in head and "busbw" in head and "size" in head))


def _sniff_json(_path: Path, head: str) -> bool:
    return head.lstrip()[:1] == "{" and '"results"' in head and ('"nccl_version"' in head or '"config"' in head)


def _sniff_inspector(_path: Path, head: str) -> bool:
    return head.lstrip()[:1] in ("{", "[") and any(f'"{k}"' in head for k in (*nccl_inspector.KINDS, "dump_stats"))


FORMATS = (
    Format("nccl-tests", "nccl-tests / rccl-tests stdout (any version; extra columns named and skipped)",
           sniff=_sniff_text, read=read_nccl_tests, priority=80),
    Format("nccl-tests-json", "nccl-tests -J JSON report", sniff=_sniff_json, read=read_nccl_tests, priority=60),
    Format("nccl-inspector", "NCCL Inspector plugin dump (v4.0-v4.4: coll_perf, p2p_perf, dump_stats markers)",
           sniff=_sniff_inspector, read=read_inspector, priority=60),
)
