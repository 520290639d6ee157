"""NCCL RAS (NCCL >= 2.24): ``fabricscope parse --format nccl-ras`` of a saved report, and the report
read either way (:func:`parse`). The host agent's query of the RAS port is :mod:`.nccl_ras_client`;
the layouts are read in :mod:`.nccl_ras_text` and :mod:`.nccl_ras_json` into :mod:`.nccl_ras_report`.

What ``fabricscope parse`` shows: one ``nccl_ras`` event of the ``--device`` source, the report's
content as its attributes (the agent posts the same event), and each line not read as a problem.
"""

from __future__ import annotations

from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.collectors.host.nccl_ras_json import parse_json
from fabricscope.collectors.host.nccl_ras_report import RasReport
from fabricscope.collectors.host.nccl_ras_text import parse_text
from fabricscope.core.model import Event

EVENT_KIND = "nccl_ras"


def parse(text: str) -> RasReport:
    """Either layout, told apart by its first character; never raises (what is not read is in problems)."""
    return parse_json(text) if text.lstrip()[:1] == "{" else parse_text(text)


def event(report: RasReport, source: str, ts: float, job: str | None = None) -> Event:
    return Event(EVENT_KIND, source, ts, job=job, attrs=report.to_attrs())


def _read(path: Path, device: str, ts: float) -> Reading:
    report = parse(path.read_text(encoding="utf-8", errors="replace"))
    return Reading(events=[event(report, device, ts)], problems=list(report.problems))


_TEXT_MARKS = ("Communicators...", "Group     Comms     Nodes", "Job summary\n===========", "Errors\n======\n",
               "Warnings\n========\n")


def _sniff(_path: Path, head: str) -> bool:
    if head.lstrip()[:1] == "{":
        return '"communicators"' in head and ('"missing_ranks"' in head or '"secondary_hash"' in head)
    return head.startswith("NCCL version ") and "Job summary" in head or any(m in head for m in _TEXT_MARKS)


FORMATS = (
    Format("nccl-ras", "NCCL RAS status report (ncclras / the RAS port's STATUS; text 2.24+, JSON 2.28.7+)",
           sniff=_sniff, read=_read, priority=70),
)
