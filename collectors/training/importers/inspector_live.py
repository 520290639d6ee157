"""NCCL Inspector live (#45 item 5): the agent tails the Inspector plugin's output directory and sends
its records as ``collectives``, for jobs that do not run the training hook (JAX, other frameworks).

The plugin (NVIDIA nccl ``ext-profiler/inspector``) writes one file per process,
``<NCCL_INSPECTOR_DUMP_DIR>/<hostname>-pid<pid>.log``, one compact JSON object per line, appended while
the job runs. Each poll reads, per file, the complete lines after the last offset (a partial last line
waits for the next poll) and turns them into records with the importer's parser
(:func:`nccl_inspector.read_objects`, Inspector v4.0-v4.4). Per file it keeps (inode, offset, the v4.3+
dump marker's context) in a JSON file beside the agent's spool, so a restarted agent goes on where it
stopped. A file whose inode changed, or that is shorter than the offset (rotated, truncated, rewritten
by a new process), is read again from 0. A line that is not JSON, and a record the parser skips, is one
problem (``fabricscope_collector_parse_problems_total{device="<host>:nccl-inspector"}``, logged once
with the file name); the rest of the file is kept. Each poll reads at most ``max_bytes_per_poll``,
files taken in turn so one busy file does not starve the others.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fabricscope.collectors.host.config import InspectorConfig
from fabricscope.collectors.selfmetrics import report_problems
from fabricscope.collectors.sinks.sender import Sink
from fabricscope.collectors.training.importers import nccl_inspector
from fabricscope.core.model import Sample

log = logging.getLogger("fabricscope.agent.inspector")

FORMAT = "nccl-inspector"
_FILE_NAME = re.compile(r"^(?P<host>.+)-pid\d+\.log$")  # the plugin's name for one process's file
_DEFAULT_DIR_PREFIX = "nccl-inspector-"  # the plugin's default directory: nccl-inspector-<SLURM job id>
_NO_JOB = {"", "unknown-jobid"}


@dataclass
class FileState:
    inode: int
    offset: int = 0
    header: Any = None  # the last v4.3+ dump marker's context, for the records after it
    meta: Any = None
    skipping: bool = False  # inside a line longer than max_line_bytes: dropped up to its newline


class OffsetStore:
    """Per-file read positions in one JSON file, replaced atomically. ``path`` None: kept in memory only
    (a restarted agent then reads every file from its start again)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._saved = ""  # what the file holds: a poll that moved nothing writes nothing

    def load(self) -> dict[str, FileState]:
        if self.path is None or not self.path.exists():
            return {}
        try:
            raw = json.loads(self.path.read_text())
            return {name: FileState(**st) for name, st in raw["files"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("NCCL Inspector offsets %s not read (%s): every file is read from its start", self.path, e)
            return {}

    def save(self, files: dict[str, FileState]) -> str | None:
        """Write the offsets; the problem's text when that failed (the next poll tries again)."""
        if self.path is None:
            return None
        text = json.dumps({"version": 1, "files": {k: asdict(v) for k, v in files.items()}})
        if text == self._saved:
            return None
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text)
            os.replace(tmp, self.path)
        except OSError as e:
            return f"offsets not saved to {self.path}: {e.strerror or e}"
        self._saved = text
        return None


def job_of(root: Path, path: Path, job: str | None) -> str | None:
    """The configured job, else the directory under ``root`` the file is in (``nccl-inspector-`` cut)."""
    if job:
        return job
    parts = path.relative_to(root).parts
    if len(parts) < 2:
        return None
    name = parts[0].removeprefix(_DEFAULT_DIR_PREFIX)
    return None if name in _NO_JOB else name


class InspectorTail:
    """A :class:`~fabricscope.core.model.Collector` whose poll sends collectives itself and returns no samples."""

    name = "nccl-inspector"

    def __init__(self, host: str, cfg: InspectorConfig, sink: Sink, *, state_path: Path | None = None) -> None:
        assert cfg.dir is not None  # InspectorConfig requires it when enabled
        self.host, self.root, self.job, self.patterns = host, Path(cfg.dir), cfg.job, cfg.files
        self.sink, self.placement, self.file_hosts = sink, cfg.placement, frozenset(cfg.file_hosts)
        self.max_bytes, self.max_line = cfg.max_bytes_per_poll, min(cfg.max_line_bytes, cfg.max_bytes_per_poll)
        self.store = OffsetStore(state_path)
        self.files = self.store.load()
        self.registered: set[tuple[str, int]] = set()
        self.no_job: set[str] = set()
        self.stats = {"lines": 0, "collectives": 0, "problems": 0, "not_queued": 0, "bytes": 0, "restarts": 0}
        self._turn = 0
        self.device = f"{host}:{self.name}"

    def scan(self) -> list[Path]:
        found = {p for pat in self.patterns for p in self.root.glob(pat) if p.is_file()}
        if self.file_hosts:
            found = {p for p in found if (m := _FILE_NAME.match(p.name)) and m["host"] in self.file_hosts}
        return sorted(found)

    def poll(self) -> list[Sample]:
        files = self.scan()
        problems: list[str] = []
        budget = self.max_bytes
        if files:
            first = self._turn % len(files)
            self._turn += 1
            for path in files[first:] + files[:first]:
                if budget <= 0:
                    break
                budget -= self._read(path, budget, problems)
        live = {str(p) for p in files}
        for gone in [k for k in self.files if k not in live]:  # deleted: forget it (a new file gets a new entry)
            del self.files[gone]
        if (p := self.store.save(self.files)) is not None:
            problems.append(p)
        self.stats["problems"] += len(problems)
        report_problems(self.device, FORMAT, problems, log)
        return []

    def _state(self, path: Path) -> FileState | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        state = self.files.get(str(path))
        if state is None or state.inode != st.st_ino or st.st_size < state.offset:
            if state is not None:
                self.stats["restarts"] += 1
                log.info("%s: rotated or truncated (inode %d -> %d, %d bytes < offset %d?): read from its start",
                         path, state.inode, st.st_ino, st.st_size, state.offset)
            state = self.files[str(path)] = FileState(st.st_ino)
        return state if st.st_size > state.offset else None

    def _read(self, path: Path, budget: int, problems: list[str]) -> int:
        """Send the complete lines after the file's offset (at most ``budget`` bytes); bytes consumed."""
        job = job_of(self.root, path, self.job)
        if job is None:
            if str(path) not in self.no_job:
                self.no_job.add(str(path))
                problems.append(f"{path}: no job: set nccl_inspector.job, or write each job's files into "
                                f"a directory named after it under {self.root}")
            return 0
        state = self._state(path)
        if state is None:
            return 0
        try:
            with path.open("rb") as fh:
                fh.seek(state.offset)
                data = fh.read(budget)
        except OSError as e:
            problems.append(f"{path}: not read: {e.strerror or e}")
            return 0
        end = data.rfind(b"\n") + 1
        if end == 0:  # no complete line yet; or one longer than any record: dropped up to its newline
            if len(data) < self.max_line:
                return 0
            problems.append(f"{path}: line at byte {state.offset} over {self.max_line} bytes: not read")
            state.offset += len(data)
            state.skipping = True
            return len(data)
        self._lines(path, job, state, data[:end], problems)
        state.offset += end
        self.stats["bytes"] += end
        return end

    def _lines(self, path: Path, job: str, state: FileState, data: bytes, problems: list[str]) -> None:
        objs: list[Any] = []
        at = state.offset
        for raw in data.split(b"\n")[:-1]:
            line_at, at = at, at + len(raw) + 1
            if state.skipping:  # the rest of an over-long line
                state.skipping = False
                continue
            if not raw.strip():
                continue
            self.stats["lines"] += 1
            try:
                objs.append(json.loads(raw))
            except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
                problems.append(f"{path}: line at byte {line_at} not JSON: {e}")
        got = nccl_inspector.read_objects(objs, str(path), state.header, state.meta)
        state.header, state.meta = got.header, got.meta
        problems.extend(got.problems)
        for c in got.collectives:
            if not self.sink.submit("collectives", c, job=job):
                self.stats["not_queued"] += 1
        self.stats["collectives"] += len(got.collectives)
        self._register(job, got.hosts)

    def _register(self, job: str, hosts: dict[int, str]) -> None:
        """Each new rank's placement: this agent's host (its NIC and switch series carry that name)."""
        new = sorted(r for r in hosts if (job, r) not in self.registered)
        if not new or not self.placement:
            return
        self.sink.put_job(job, {"ranks": [{"rank": r, "host": self.host, "inspector_hostname": hosts[r]} for r in new]})
        self.registered.update((job, r) for r in new)
