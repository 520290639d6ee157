"""nccl-tests / rccl-tests results -> acceptance runs (the body of ``POST /v1/acceptance/runs``).

``parse`` takes the text of one file: the stdout of ``all_reduce_perf``, ``all_gather_perf``,
``reduce_scatter_perf``, ``alltoall_perf``, ``broadcast_perf``, ``reduce_perf``, ``sendrecv_perf``,
``gather_perf``, ``scatter_perf`` or ``hypercube_perf`` (NVIDIA nccl-tests of any version since
2017, ROCm rccl-tests), or nccl-tests' ``-J`` JSON report. It returns one parsed run per run in
the file (logs often hold several). Reading never stops at a bad line: what could not be read is
listed in the run's ``problems`` (with line numbers) and the rest is kept. Only a text in which
nothing of nccl-tests is recognisable raises :class:`ParseError`.

Pure: text in, dicts out; ``fabric`` and ``labels`` are the caller's (the CLI adds them), and a
run without a printed date has ``started_at`` None (the CLI uses the file's mtime).
"""

from __future__ import annotations

from datetime import UTC, tzinfo

from fabricscope.collectors.training.importers.nccl_tests_json import parse_json
from fabricscope.collectors.training.importers.nccl_tests_run import (
    OPS,
    Device,
    ParsedRun,
    Row,
    op_from_binary,
    op_from_name,
)
from fabricscope.collectors.training.importers.nccl_tests_text import parse_text
from fabricscope.core.errors import ParseError

__all__ = ["OPS", "Device", "ParseError", "ParsedRun", "Row", "op_from_binary", "op_from_name", "parse"]


def parse(text: str, *, source: str = "<input>", op: str | None = None, tz: tzinfo = UTC) -> list[ParsedRun]:
    """The runs in ``text``. ``source`` is the file name (kept in each run); the op is the binary the
    output names, else ``op``, else the one ``source`` suggests; ``tz`` is the zone of the local
    times nccl-tests prints (``-S`` columns, JSON ``start_time``)."""
    if op is not None and op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")
    text = text.removeprefix("\ufeff")  # a BOM, left by editors that saved the log
    if text.lstrip().startswith("{"):
        builders = [parse_json(text, source, tz)]
    else:
        builders = [b for b in parse_text(text, source, tz) if b.recognised()]
    if not builders:
        raise ParseError(f"{source}: no nccl-tests output found (no '# nThread' header, device line, "
                         "result row or footer)")
    return [b.finish(op) for b in builders]
