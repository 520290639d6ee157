"""Run Grafana PostgreSQL-datasource queries without Grafana: load dashboards, list every query,
expand template variables and the datasource's macros the way Grafana does, run them.

Expansion follows Grafana's SQL datasource (pkg/tsdb/grafana-postgresql-datasource/macros.go and
the frontend's SQL variable interpolation):
  * `${var:sqlstring}` quotes every value ('' escapes a quote) and joins them with commas;
    `$var` / `${var}` / `[[var]]` do the same for multi-value or include-All variables and insert the
    raw text otherwise; `${var:raw}` / `${var:csv}` join without quotes; "All" without a custom
    all-value means every option;
  * `$__timeFilter(c)` -> `c BETWEEN 'from' AND 'to'`, `$__timeFrom()`, `$__timeTo()`,
    `$__timeGroup(c, i)` -> `floor(extract(epoch from c)/N)*N` (or `time_bucket('Ns', c)` when the
    datasource sets timescaledb), `$__timeGroupAlias` adds `AS "time"`, `$__time(c)`,
    `$__timeEpoch(c)`, `$__unixEpochFilter(c)`, `$__unixEpochFrom()`, `$__unixEpochTo()`;
  * `$__interval` / `$__interval_ms` from the range and the number of points wanted.
An unknown `$__macro(...)` raises: Grafana would send it to the server verbatim and fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DASHBOARD_DIR = Path(__file__).resolve().parent.parent / "dashboards" / "json"
NICE_INTERVALS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
_VAR_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]|\$(\w+)")
_MACRO_RE = re.compile(r"\$__(\w+)\(")


class MacroError(ValueError):
    pass


@dataclass(frozen=True)
class Query:
    dashboard: str
    where: str  # "panel 'Title' A", "annotation 'Alerts'", "variable 'job'"
    kind: str  # panel | annotation | variable
    sql: str
    fmt: str  # time_series | table
    panel: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Context:
    """What Grafana knows when it sends a query: the time range, interval, variable values."""

    time_from: datetime
    time_to: datetime
    variables: dict[str, list[str]]
    multi: set[str] = field(default_factory=set)  # variables formatted as quoted lists by default
    timescaledb: bool = False
    max_points: int = 600
    min_interval_s: float = 10.0

    @property
    def interval_s(self) -> float:
        raw = (self.time_to - self.time_from).total_seconds() / self.max_points
        raw = max(raw, self.min_interval_s)
        return next((float(n) for n in NICE_INTERVALS_S if n >= raw), float(NICE_INTERVALS_S[-1]))


def load_dashboards(directory: Path = DASHBOARD_DIR) -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def all_panels(dash: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dash.get("panels", []):
        yield p
        yield from p.get("panels", [])  # collapsed rows keep their panels inside


def queries(name: str, dash: dict[str, Any]) -> Iterator[Query]:
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["rawSql"] if isinstance(v["query"], dict) else v["query"]
            yield Query(name, f"variable '{v['name']}'", "variable", q, "table")
    for a in dash.get("annotations", {}).get("list", []):
        if "target" in a:
            yield Query(name, f"annotation '{a['name']}'", "annotation", a["target"]["rawSql"], "table")
    for p in all_panels(dash):
        for t in p.get("targets", []):
            yield Query(name, f"panel '{p['title']}' {t['refId']}", "panel", t["rawSql"], t.get("format", "table"), p)


def format_interval(seconds: float) -> str:
    """gtime.FormatInterval: the largest whole unit."""
    ms = int(round(seconds * 1000))
    for unit, size in (("d", 86400000), ("h", 3600000), ("m", 60000), ("s", 1000)):
        if ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_interval(text: str) -> float:
    m = re.fullmatch(r"\s*'?(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)'?\s*", text)
    if not m:
        raise MacroError(f"cannot parse interval {text!r}")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}[m.group(2)]
    return float(m.group(1)) * scale


def _quote(v: str) -> str:
    return "'" + v.replace("'", "''") + "'"


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f").rstrip("0").rstrip(".") + "Z"


def interpolate_variables(text: str, ctx: Context) -> str:
    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3) or m.group(5)
        fmt = m.group(2) or m.group(4)
        if name.startswith("__") or name not in ctx.variables:
            return m.group(0)  # builtins (and unknown names, which the structural test reports)
        values = ctx.variables[name]
        if fmt == "sqlstring" or (fmt is None and name in ctx.multi):
            return ",".join(_quote(v) for v in values)
        if fmt in (None, "raw", "csv"):
            return ",".join(values)
        raise MacroError(f"variable format {fmt!r} is not supported by this expander")

    return _VAR_RE.sub(sub, text)


def _split_args(s: str, start: int) -> tuple[list[str], int]:
    """Arguments of a macro call whose '(' is at s[start-1]; returns (args, index after ')')."""
    depth, i = 0, start
    args: list[str] = []
    cur: list[str] = []
    while i < len(s):
        ch = s[i]
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                args.append("".join(cur).strip())
                return [a for a in args if a != ""], i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(ch)
        i += 1
    raise MacroError("unbalanced parentheses in a macro call")


def _macro(name: str, args: list[str], ctx: Context) -> str:
    frm, to = ctx.time_from, ctx.time_to
    if name == "timeFilter":
        return f"{args[0]} BETWEEN '{_rfc3339(frm)}' AND '{_rfc3339(to)}'"
    if name == "timeFrom":
        return f"'{_rfc3339(frm)}'"
    if name == "timeTo":
        return f"'{_rfc3339(to)}'"
    if name == "time":
        return f'{args[0]} AS "time"'
    if name == "timeEpoch":
        return f'extract(epoch from {args[0]}) as "time"'
    if name in ("timeGroup", "timeGroupAlias"):
        if len(args) < 2:
            raise MacroError(f"$__{name} needs a column and an interval")
        secs = parse_interval(args[1])
        n = f"{secs:g}"
        expr = (f"time_bucket('{n}s',{args[0]})" if ctx.timescaledb
                else f"floor(extract(epoch from {args[0]})/{n})*{n}")
        return expr + (' AS "time"' if name == "timeGroupAlias" else "")
    if name == "unixEpochFilter":
        return f"{args[0]} >= {int(frm.timestamp())} AND {args[0]} <= {int(to.timestamp())}"
    if name == "unixEpochFrom":
        return str(int(frm.timestamp()))
    if name == "unixEpochTo":
        return str(int(to.timestamp()))
    raise MacroError(f"unknown macro $__{name}()")


def expand(sql: str, ctx: Context) -> str:
    """Variables first (as Grafana's frontend does), then the interval, then the backend macros."""
    out = interpolate_variables(sql, ctx)
    out = out.replace("$__interval_ms", str(int(ctx.interval_s * 1000)))
    out = out.replace("$__interval", format_interval(ctx.interval_s))
    while (m := _MACRO_RE.search(out)) is not None:
        args, end = _split_args(out, m.end())
        out = out[:m.start()] + _macro(m.group(1), args, ctx) + out[end:]
    if "$__" in out:
        raise MacroError(f"unexpanded builtin left in query: {out[out.index('$__'):][:40]!r}")
    return out


def variable_refs(text: str) -> set[str]:
    """Names of the dashboard variables a text refers to (builtins `__x` excluded)."""
    names = {m.group(1) or m.group(3) or m.group(5) for m in _VAR_RE.finditer(text)}
    return {n for n in names if not n.startswith("__")}


def resolve_variables(conn: Any, dashboards: dict[str, dict[str, Any]], ctx: Context) -> Context:
    """Fill `ctx.variables` by running the variable queries in order (a later variable may use an
    earlier one); variables already set are kept; multi-value ones are set to "All" (every option)."""
    for dash in dashboards.values():
        for v in dash.get("templating", {}).get("list", []):
            name = v["name"]
            if v.get("multi") or v.get("includeAll"):
                ctx.multi.add(name)
            if name in ctx.variables:
                continue
            if v["type"] == "query":
                rows = conn.execute(expand(v["query"], ctx)).fetchall()
                values = [str(r[0]) for r in rows]
                ctx.variables[name] = values if name in ctx.multi else values[:1]
            elif v["type"] in ("textbox", "constant", "custom"):
                ctx.variables[name] = [str(v.get("query", ""))]
    return ctx
