"""The text layout of an NCCL RAS status report (every release since 2.24), line by line.

Each line is matched against the lines NCCL's ``src/ras/client_support.cc`` prints (2.24-2.30); the
handler of the first pattern that matches updates the report. Where a rank line belongs (a missing
rank, an error, a status or an operation count) is the block it is in: the section (Errors,
Warnings) and the last ``#<group>-<index> (<hash>) KIND`` header and sub-header above it. A line no
pattern matches, or a rank line outside any block, is a problem.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from fabricscope.collectors.host.nccl_ras_report import Comm, Process, RankState, RasReport, norm_hash

_PROC = r"(?:GPU (?P<gpu>.+?) managed by process (?P<pid>\d+) on node (?P<host>\S*)|\[process information not found\])"
_RANK = re.compile(r"Rank (?P<rank>\d+)(?: (?:has status (?P<status>\S+)|reported (?P<error>.+?)"
                   r"|has launched up to operation (?P<ops>\d+)|(?P<none>has not launched any operations)))?"
                   rf" -- {_PROC}$")
_NOCOMM = ("UNKNOWN", "NOCOMM")  # 2.24-2.25 said UNKNOWN for a rank without the communicator


@dataclass
class _Block:
    comm: Comm | None = None
    kind: str = ""  # INCOMPLETE, ERROR, MISMATCH (a communicator) or missing_procs, dead_procs, TIMEOUT
    sub: str = ""  # init_error, async_error, status, ops
    detail: str | None = None  # the "N ranks reported E" / "N ranks have status S" heading's E or S
    op: str | None = None
    value: int | None = None  # the "N ranks have launched up to operation V" heading's V
    pending: list[RankState] = field(default_factory=list)  # ops ranks: behind or not is known at the block's end


class _TextReader:
    def __init__(self) -> None:
        self.r = RasReport(format="text")
        self.section = ""
        self.summary_row = ""  # the job summary's last header line: which columns the next number row has
        self.block = _Block()
        self.by_ref: dict[str, Comm] = {}
        self.seen = False
        self.lineno = 0
        self.handlers: list[tuple[re.Pattern[str], Callable[[re.Match[str]], None]]] = [
            (re.compile(r"NCCL version (?P<v>\S+) compiled with CUDA \S+"), self._version),
            (re.compile(r"CUDA runtime version -?\d+, driver version -?\d+"), self._nothing),
            (re.compile(r"=+"), self._nothing),
            (re.compile(r"Job summary"), self._summary),
            (re.compile(r"Communicators\.\.\.(?: \((?P<s>[\d.]+)s\))?"), self._communicators),
            (re.compile(r"(?P<name>Errors|Warnings)"), self._section),
            (re.compile(r"Nodes\s+Processes.*|\(total\).*|per node.*|per process|Processes\s+GPUs"), self._header),
            (re.compile(r"(?P<n>\d+(?:\s+\d+)+)"), self._numbers),
            (re.compile(r"The outlier nodes?:|Node \S+ running process(?:es)? [\d,]+"), self._nothing),
            (re.compile(r"Group\s+Comms\s+Nodes.*|#\s+in group\s+per comm.*|No communicator data collected!"),
             self._table),
            (re.compile(r"(?P<g>\d+)\s+(?P<c>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>\d+(?:-\d+)?)\s+(?P<size>\d+)\s+"
                        r"(?P<total>\d+)\s+(?P<status>[A-Z]+)\s+(?P<errors>[A-Z,]+)"), self._group),
            (re.compile(r"(?P<kind>INCOMPLETE|DEAD|TIMEOUT)"), self._job_block),
            (re.compile(r"Missing communicator data from (?P<n>\d+) job process(?:es)?"
                        r"|(?P<d>\d+) job process(?:es are| is) considered dead .*"
                        r"|\[could not find information on \d+ process(?:es)?\]"), self._nothing),
            (re.compile(r"Process (?P<pid>\d+) on node (?P<host>\S*) managing GPUs? (?P<gpus>.+)"), self._process),
            (re.compile(r"Encountered (?P<n>\d+) communication timeouts? while gathering communicator data"),
             self._timeouts),
            (re.compile(r"#(?P<g>\d+)-(?P<c>\d+) \((?P<hash>[0-9a-fA-F]+)\) (?P<kind>INCOMPLETE|ERROR|MISMATCH)"),
             self._comm),
            (re.compile(r"Missing communicator data from (?P<n>\d+) ranks?"), self._missing_count),
            (re.compile(r"The missing ranks?: (?P<ranks>[\d,]+)"), self._missing_list),
            (re.compile(r"(?P<kind>Initialization|Asynchronous) errors? on \d+ ranks?"), self._errors_of),
            (re.compile(r"\d+ ranks reported (?P<e>.+)"), self._detail),
            (re.compile(r"Communicator ranks have different status"), self._status_of),
            (re.compile(r"\d+ ranks have status (?P<e>\S+)"), self._detail),
            (re.compile(r"The unknown ranks: (?P<ranks>[\d,]+)"), self._unknown_list),
            (re.compile(r"Rank (?P<ranks>[\d,]+) has status (?P<s>\S+)"), self._unknown_list),
            (re.compile(r"Communicator ranks have different (?P<op>.+) operation counts"), self._ops_of),
            (re.compile(r"(?P<n>\d+) ranks (?:have launched up to operation (?P<v>\d+)"
                        r"|(?P<none>have not launched any operations))"), self._ops_heading),
            (_RANK, self._rank),
        ]

    # -- driving ------------------------------------------------------------------------------
    def read(self, text: str) -> RasReport:
        for self.lineno, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line:
                continue
            if line.startswith("ERROR:"):  # the server's answer to a command it did not take
                self.r.problems.append(f"line {self.lineno}: the RAS server said {line!r}")
                continue
            for pattern, handle in self.handlers:
                if (m := pattern.fullmatch(line)) is not None:
                    handle(m)
                    break
            else:
                self.r.problems.append(f"line {self.lineno}: not read: {line[:160]!r}")
        self._end_block()
        if not self.seen:
            self.r.problems.append("no NCCL RAS report in the text (no version, summary, communicators, "
                                   "errors or warnings section)")
        return self.r

    def _end_block(self) -> None:
        """Ranks of an operation-count block: behind when they launched fewer than the most advanced."""
        b = self.block
        if b.pending:
            top = max((int(c["count"]) for c in b.comm.op_counts if c["op"] == b.op), default=0) if b.comm else 0
            for st in b.pending:
                if st.count is not None and st.count < top:
                    st.state = "behind" if st.count > 0 else "not_launched"
                    self.r.ranks.append(st)
        self.block = _Block(comm=b.comm, kind=b.kind)

    def _new_block(self, kind: str, comm: Comm | None = None) -> None:
        self._end_block()
        self.block = _Block(comm=comm, kind=kind)

    # -- sections and the job summary ------------------------------------------------------------
    def _nothing(self, _m: re.Match[str]) -> None:
        return

    def _version(self, m: re.Match[str]) -> None:
        self.r.nccl_version, self.seen = m["v"], True

    def _summary(self, _m: re.Match[str]) -> None:
        self._new_block("")
        self.section, self.seen = "summary", True

    def _communicators(self, m: re.Match[str]) -> None:
        self._new_block("")
        self.section, self.seen = "communicators", True
        if m["s"]:
            self.r.collection_s = float(m["s"])

    def _section(self, m: re.Match[str]) -> None:
        self._new_block("")
        self.section, self.seen = m["name"].lower(), True

    def _table(self, _m: re.Match[str]) -> None:
        self.section, self.seen = "communicators", True

    def _header(self, m: re.Match[str]) -> None:
        self.summary_row = m[0]

    def _numbers(self, m: re.Match[str]) -> None:
        n = [int(x) for x in m["n"].split()]
        if self.section != "summary":
            self.r.problems.append(f"line {self.lineno}: numbers outside the job summary: {m[0]!r}")
        elif self.summary_row.startswith("(total)") and "per node" in self.summary_row and len(n) == 5:
            self.r.nodes, self.r.processes, self.r.gpus = n[0], n[3], n[4]
        elif self.summary_row.startswith("(total)") and len(n) == 3:
            self.r.nodes, self.r.processes, self.r.gpus = n
        # other rows are the distributions of processes per node and GPUs per process

    def _group(self, m: re.Match[str]) -> None:
        self.r.groups.append({"group": int(m["g"]), "comms": int(m["c"]), "nodes": int(m["nodes"]),
                              "ranks_per_node": m["rpn"], "nranks": int(m["size"]), "ranks_in_group": int(m["total"]),
                              "status": m["status"], "errors": m["errors"].split(",")})

    # -- Errors and Warnings: job processes ------------------------------------------------------
    def _job_block(self, m: re.Match[str]) -> None:
        self._new_block({"INCOMPLETE": "missing_procs", "DEAD": "dead_procs"}.get(m["kind"], m["kind"]))

    def _process(self, m: re.Match[str]) -> None:
        p = Process(int(m["pid"]), m["host"], m["gpus"])
        if self.block.kind == "missing_procs":
            self.r.unresponsive_processes.append(p)
        elif self.block.kind == "dead_procs":
            self.r.dead_processes.append(p)
        else:
            self.r.problems.append(f"line {self.lineno}: a process outside the INCOMPLETE and DEAD lists")

    def _timeouts(self, m: re.Match[str]) -> None:
        self.r.timeouts = int(m["n"])

    # -- Errors and Warnings: communicators ------------------------------------------------------
    def _comm(self, m: re.Match[str]) -> None:
        ref = f"#{m['g']}-{m['c']}"
        comm = self.by_ref.get(ref)
        if comm is None:
            group = next((g for g in self.r.groups if g["group"] == int(m["g"])), None)
            comm = self.by_ref[ref] = Comm(norm_hash(m["hash"]), nranks=group["nranks"] if group else None, ref=ref,
                                           status=group["status"] if group else None)
            self.r.comms.append(comm)
        comm.errors.append(m["kind"])
        self._new_block(m["kind"], comm)

    def _in_comm(self, kind: str) -> Comm | None:
        if self.block.comm is None or self.block.kind != kind:
            self.r.problems.append(f"line {self.lineno}: outside a communicator's {kind} block")
            return None
        return self.block.comm

    def _missing_count(self, m: re.Match[str]) -> None:
        if (comm := self._in_comm("INCOMPLETE")) is not None and comm.nranks is not None:
            comm.ranks_seen = comm.nranks - int(m["n"])

    def _missing_list(self, m: re.Match[str]) -> None:
        if (comm := self._in_comm("INCOMPLETE")) is not None:
            for rank in m["ranks"].split(","):
                self.r.ranks.append(RankState(comm.hash, int(rank), "missing", nranks=comm.nranks))

    def _errors_of(self, m: re.Match[str]) -> None:
        if (comm := self._in_comm("ERROR")) is not None:
            self._end_block()
            self.block = _Block(comm=comm, kind="ERROR", sub="init_error" if m["kind"] == "Initialization"
                                else "async_error")

    def _status_of(self, _m: re.Match[str]) -> None:
        if (comm := self._in_comm("MISMATCH")) is not None:
            self._end_block()
            self.block = _Block(comm=comm, kind="MISMATCH", sub="status")

    def _ops_of(self, m: re.Match[str]) -> None:
        if (comm := self._in_comm("MISMATCH")) is not None:
            self._end_block()
            self.block = _Block(comm=comm, kind="MISMATCH", sub="ops", op=m["op"])

    def _detail(self, m: re.Match[str]) -> None:
        self.block.detail = m["e"]

    def _ops_heading(self, m: re.Match[str]) -> None:
        b = self.block
        if b.comm is None or b.sub != "ops":
            self.r.problems.append(f"line {self.lineno}: operation counts outside a MISMATCH block")
            return
        b.value = 0 if m["none"] else int(m["v"])
        b.comm.op_counts.append({"op": b.op, "count": b.value, "ranks": int(m["n"])})

    def _unknown_list(self, m: re.Match[str]) -> None:
        """2.24-2.25: the ranks without the communicator, by number only."""
        b = self.block
        if b.comm is None or b.sub != "status":
            self.r.problems.append(f"line {self.lineno}: a rank status outside a MISMATCH block")
            return
        status = m.groupdict().get("s") or "UNKNOWN"
        for rank in m["ranks"].split(","):
            self.r.ranks.append(self._status_state(RankState(b.comm.hash, int(rank), "status", nranks=b.comm.nranks),
                                                   status))

    @staticmethod
    def _status_state(st: RankState, status: str) -> RankState:
        st.state, st.detail = ("nocomm", None) if status in _NOCOMM else ("status", status)
        return st

    def _rank(self, m: re.Match[str]) -> None:
        b = self.block
        if b.comm is None or (b.kind != "INCOMPLETE" and not b.sub):
            self.r.problems.append(f"line {self.lineno}: a rank line outside a communicator block")
            return
        st = RankState(b.comm.hash, int(m["rank"]), b.sub or "missing", nranks=b.comm.nranks, host=m["host"],
                       pid=int(m["pid"]) if m["pid"] else None, gpu=m["gpu"])
        if b.kind == "INCOMPLETE":
            st.state = self._missing_state(st)
        elif b.sub == "status":
            self._status_state(st, m["status"] or b.detail or "UNKNOWN")
        elif b.sub == "ops":
            value = int(m["ops"]) if m["ops"] else 0 if m["none"] else b.value
            if m["ops"] or m["none"]:  # a rank alone at its count: no heading line carried it
                b.comm.op_counts.append({"op": b.op, "count": value, "ranks": 1})
            st.op, st.count = b.op, value
            b.pending.append(st)
            return
        else:
            st.detail = m["error"] or b.detail
        self.r.ranks.append(st)

    def _missing_state(self, st: RankState) -> str:
        """A missing rank's process: dead, not answering, or (not listed there) only missing."""
        key = (st.pid, st.host)
        if any((p.pid, p.host) == key for p in self.r.dead_processes):
            return "dead"
        if any((p.pid, p.host) == key for p in self.r.unresponsive_processes):
            return "unresponsive"
        return "missing"


def parse_text(text: str) -> RasReport:
    return _TextReader().read(text)
