"""nccl-tests' JSON report (``-J/--output_file run.json``, nccl-tests 2.17.6 and later).

The format, from NVIDIA/nccl-tests src/util.cu (``JSON_FILE_VERSION`` 1, then 3 with ``-I``): one
object with ``version``, ``start_time`` (local time, ``%Y-%m-%d %H:%M:%S``), ``args`` (argv),
``env``, ``nccl_version`` (NCCL_VERSION_CODE), ``config`` (``nthreads``, ``ngpus``, ``validation``
... and ``devices``: one entry per *process*, its first device line), ``results`` (per line:
``size``, ``count``, ``type``, ``redop``, ``root`` (a string, ``"    -1"``), ``out_of_place`` and
``in_place``: ``{time|cpu_time, alg_bw, bus_bw, nwrong}``, null when not run), ``out_of_bounds``,
``average_bus_bandwidth`` (spelt ``average_bus_bandwidith``/``bandwidith`` before 2.17.9),
``errors`` and ``end_time``. A NaN double is written as the string ``"nan"``.

The report is written as the run goes and closed at the end, so a run that died leaves an
unterminated document: it is read up to its last complete value.
"""

from __future__ import annotations

import json
from datetime import datetime, tzinfo
from pathlib import PurePath
from typing import Any

from fabricscope.collectors.training.importers.nccl_tests_run import (
    MAX_COMMAND,
    Device,
    Row,
    RunBuilder,
    finite,
    nccl_code_version,
    op_from_binary,
)
from fabricscope.core.errors import ParseError

_CLOSERS = {"{": "}", "[": "]"}


def _salvage(text: str) -> Any:
    """The document cut after its last complete value and closed; ValueError if nothing is left."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (position of a ',' between values, the closers needed there)
    in_str = esc = False
    for i, ch in enumerate(text):
        if in_str:
            esc, in_str = (not esc and ch == "\\"), in_str and (esc or ch != '"')
            continue
        if ch == '"':
            in_str = True
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif ch in "]}" and stack:
            stack.pop()
        elif ch == "," and stack:
            cuts.append((i, "".join(reversed(stack))))
    for pos, closers in reversed(cuts[-200:]):
        try:
            return json.loads(text[:pos] + closers)
        except json.JSONDecodeError:
            continue
    raise ValueError("no complete value")


def load(text: str, source: str) -> tuple[dict[str, Any], list[str]]:
    try:
        doc, problems = json.loads(text), []
    except json.JSONDecodeError as e:
        try:
            doc = _salvage(text)
        except ValueError:
            raise ParseError(f"{source}: not nccl-tests JSON ({e.msg} at character {e.pos})") from e
        problems = [f"JSON ends early ({e.msg} at character {e.pos}): read up to the last complete value"]
    if not isinstance(doc, dict) or not ({"results", "config"} & doc.keys()):
        raise ParseError(f"{source}: JSON without nccl-tests 'config' or 'results'")
    return doc, problems


def parse_json(text: str, source: str, tz: tzinfo) -> RunBuilder:
    doc, problems = load(text, source)
    run = RunBuilder(source, problems=problems)
    args = [str(a) for a in _list(doc.get("args"))]
    if args:
        run.command = " ".join([PurePath(args[0]).name, *args[1:]])[:MAX_COMMAND]
        run.op = op_from_binary(run.command)
    if isinstance(doc.get("nccl_version"), int):
        run.versions["nccl"] = nccl_code_version(doc["nccl_version"])
    if isinstance(doc.get("start_time"), str):
        try:
            run.started_at = datetime.strptime(doc["start_time"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz).timestamp()
        except ValueError:
            run.problems.append(f"start_time not understood: {doc['start_time'][:40]!r}")
    config: dict[str, Any] = doc["config"] if isinstance(doc.get("config"), dict) else {}
    procs = 0
    for i, d in enumerate(_list(config.get("devices"))):
        try:
            run.devices.append(Device(rank=int(d["rank"]), group=int(d["group"]), pid=int(d["pid"]),
                                      host=str(d["hostname"]), device=int(d["device"]),
                                      bus_id=str(d["device_hex"]), name=str(d.get("device_info") or "") or None))
            run.hints += " " + str(d.get("device_info", ""))
            procs += 1
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            run.problems.append(f"config.devices[{i}]: {type(e).__name__} {e}")
    if isinstance(config.get("nthreads"), int) and isinstance(config.get("ngpus"), int):
        run.threads, run.gpus = config["nthreads"], config["ngpus"]
    if isinstance(config.get("validation"), int):
        run.validation = config["validation"]
    for i, res in enumerate(_list(doc.get("results"))):
        try:
            run.rows.extend(_rows(res))
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            run.problems.append(f"results[{i}]: {type(e).__name__} {e}")
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        run.oob, run.footer = oob["count"], True
    avg = doc.get("average_bus_bandwidth") or doc.get("average_bus_bandwidith")
    if isinstance(avg, dict):
        value = avg.get("bandwidth", avg.get("bandwidith"))
        try:
            run.avg, run.footer = finite(str(value)), True
        except ValueError:
            run.problems.append(f"average_bus_bandwidth not a number: {value!r}")
    run.problems.extend(f"nccl-tests reported: {str(e)[:200]}" for e in _list(doc.get("errors")) if e)
    if procs:  # one device entry per process: its first device line only (util.cu parseRankInfo)
        run.ranks_per_device = (run.threads or 1) * (run.gpus or 1)
    return run


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _rows(res: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for placement in ("out_of_place", "in_place"):
        body = res.get(placement)
        if body is None:
            continue
        nwrong = body.get("nwrong")
        wrong = None if nwrong is None else int(finite(str(nwrong)))
        time = body["time"] if "time" in body else body["cpu_time"]
        rows.append(Row(size_bytes=int(res["size"]), count=int(res["count"]), type=str(res["type"]),
                        redop=str(res["redop"]), root=int(str(res["root"]).strip()), placement=placement,
                        time_us=finite(str(time)), algbw_gbps=finite(str(body["alg_bw"])),
                        busbw_gbps=finite(str(body["bus_bw"])), wrong=wrong))
    return rows
