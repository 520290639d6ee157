"""Draw the fabricscope Grafana dashboards into PNG files, from the same SQL Grafana runs.

Every panel of a dashboard is drawn where its gridPos puts it (time series, heatmaps, stats, bar
gauges, tables), with the dashboard's annotations as shaded spans on the time series; queries are
expanded by tools/grafana_sql.py exactly as in tests/dashboards. For people without a Grafana at
hand (and for the README pictures).

    python tools/render_dashboards.py --dsn "$(fabricscope db url)" --job JOB [--out docs/img]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import psycopg  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import PowerNorm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tools.grafana_sql import Context, all_panels, expand, load_dashboards, resolve_variables  # noqa: E402

GRAFANA_COLORS = {"purple": "#8f3bb8", "orange": "#ff9830", "yellow": "#e0b400", "red": "#e02f44",
                  "blue": "#3274d9", "green": "#37872d", "gray": "#8e8e8e", "text": "#202226"}
PALETTE = ["#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0",
           "#508642", "#cca300", "#447ebc", "#c15c17"]
UNIT_SCALE = {"Bps": (1e9, "GB/s"), "percentunit": (0.01, "%"), "s": (1, "s"), "iops": (1, "IOPS"),
              "short": (1, "/s"), "none": (1, ""), "bytes": (1e9, "GB")}
ROW_IN = 0.42  # inches per Grafana grid row


def _unit(panel: dict[str, Any]) -> tuple[float, str]:
    return UNIT_SCALE.get(panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "none"), (1, ""))


def _overrides(panel: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for o in panel.get("fieldConfig", {}).get("overrides", []):
        if o["matcher"]["id"] == "byName":
            out[o["matcher"]["options"]] = {p["id"]: p["value"] for p in o["properties"]}
    return out


def _color(props: dict[str, Any], i: int) -> str:
    c = props.get("color", {}).get("fixedColor")
    return GRAFANA_COLORS.get(c, c) if c else PALETTE[i % len(PALETTE)]


def _t(v: Any) -> datetime:
    return v if isinstance(v, datetime) else datetime.fromtimestamp(float(v), UTC)


def _run(conn: psycopg.Connection, sql: str, ctx: Context) -> tuple[list[str], list[tuple[Any, ...]]]:
    cur = conn.execute(expand(sql, ctx))
    return [d.name for d in cur.description or []], cur.fetchall()


def _series(cols: list[str], rows: list[tuple[Any, ...]]) -> dict[str, tuple[list[datetime], list[float]]]:
    """Grafana's time series: long (time, metric, value) or wide (time, a, b, ...)."""
    out: dict[str, tuple[list[datetime], list[float]]] = {}
    for r in rows:
        pairs = [(str(r[1]), r[2])] if "metric" in cols else list(zip(cols[1:], r[1:], strict=True))
        for name, v in pairs:
            if v is None:
                continue
            ts, vs = out.setdefault(name, ([], []))
            ts.append(_t(r[0]))
            vs.append(float(v))
    return out


def _time_axis(ax: Axes) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.25)


def draw_timeseries(ax: Axes, panel: dict[str, Any], data: list[tuple[list[str], list[tuple[Any, ...]]]],
                    spans: Sequence[tuple[datetime, datetime | None, str]], interval_s: float) -> None:
    scale, label = _unit(panel)
    ov = _overrides(panel)
    custom = panel["fieldConfig"]["defaults"].get("custom", {})
    bars = custom.get("drawStyle") == "bars"
    stack = custom.get("stacking", {}).get("mode") == "normal"
    for t0, t1, col in spans:
        if t1 is None:  # a point event (a version change): Grafana draws a line, a 1 s span would not show
            ax.axvline(float(mdates.date2num(t0)), color=col, alpha=0.8, lw=1.2, ls="--")
            continue
        ax.axvspan(float(mdates.date2num(t0)), float(mdates.date2num(t1)), color=col, alpha=0.12, lw=0)
    lines: dict[str, tuple[list[datetime], list[float]]] = {}
    for cols, rows in data:
        lines.update(_series(cols, rows))
    bottom: dict[datetime, float] = {}
    for i, (name, (times, vs)) in enumerate(lines.items()):
        ts = mdates.date2num(times)
        props = ov.get(name, {})
        c = _color(props, i)
        y = np.asarray(vs) / scale
        if props.get("custom.drawStyle") == "points":
            ax.scatter(ts, y, s=22, color=c, label=name, zorder=3)
        elif bars:
            base = np.array([bottom.get(t, 0.0) for t in times]) if stack else None
            ax.bar(ts, y, width=interval_s / 86400 * 0.85, bottom=base, color=c, label=name, align="edge")
            if stack:
                for t, v in zip(times, y, strict=True):
                    bottom[t] = bottom.get(t, 0.0) + float(v)
        elif props.get("custom.lineWidth") == 0 and "custom.fillBelowTo" in props:
            other = lines.get(props["custom.fillBelowTo"])
            if other:
                lo = dict(zip(other[0], np.asarray(other[1]) / scale, strict=True))
                pts = [(float(mdates.date2num(t)), lo[t], v) for t, v in zip(times, y, strict=True) if t in lo]
                ax.fill_between([p[0] for p in pts], [p[1] for p in pts], [p[2] for p in pts], color=c,
                                alpha=0.2, lw=0, label=name)
        else:
            ls = "--" if "custom.lineStyle" in props else "-"
            ax.plot(ts, y, ls, color=c, lw=1.1, label=name)
    if 0 < len(lines) <= 12:
        ax.legend(fontsize=6, ncol=min(len(lines), 6), loc="upper left", framealpha=0.6)
    ax.set_ylabel(label, fontsize=7)
    ax.xaxis_date()
    _time_axis(ax)


def draw_heatmap(ax: Axes, panel: dict[str, Any], cols: list[str], rows: list[tuple[Any, ...]]) -> None:
    scale, label = _unit(panel)
    series = _series(cols, rows)
    names = sorted(series)
    times = sorted({t for ts, _ in series.values() for t in ts})
    ti = {t: i for i, t in enumerate(times)}
    grid = np.full((len(names), len(times)), np.nan)
    for r, name in enumerate(names):
        for t, v in zip(*series[name], strict=True):
            grid[r, ti[t]] = v / scale
    scheme = panel["options"].get("color", {}).get("scheme", "Oranges")
    cmap = plt.get_cmap(scheme if scheme in plt.colormaps() else "Oranges")
    vmax = np.nanmax(grid) if np.isfinite(grid).any() else 1.0
    extent = (mdates.date2num(times[0]), mdates.date2num(times[-1]), len(names), 0) if times else None
    im = ax.imshow(grid, aspect="auto", cmap=cmap, norm=PowerNorm(0.5, vmin=0, vmax=max(vmax, 1e-12)),
                   interpolation="nearest", extent=extent)
    ax.set_yticks(np.arange(len(names)) + 0.5)
    ax.set_yticklabels(names, fontsize=max(3.5, 7 - len(names) / 12))
    ax.xaxis_date()
    _time_axis(ax)
    cb = plt.colorbar(im, ax=ax, pad=0.01, fraction=0.03)
    cb.ax.tick_params(labelsize=6)
    cb.set_label(label, fontsize=7)


def _fmt(v: Any, unit: str | None = None) -> str:
    if v is None:
        return ""
    if isinstance(v, datetime):
        return v.strftime("%H:%M:%S")
    if isinstance(v, int | float) or hasattr(v, "as_integer_ratio"):
        f = float(v)
        if unit == "percentunit":
            return f"{100 * f:.1f}%"
        if unit == "Bps":
            return f"{f / 1e9:.2f} GB/s"
        if unit == "bytes":
            return f"{f / 1e9:.2f} GB"
        if f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return f"{f:.3f}" + (" s" if unit == "s" else "")
    return str(v)


def draw_table(ax: Axes, panel: dict[str, Any], cols: list[str], rows: list[tuple[Any, ...]]) -> None:
    ov = _overrides(panel)
    keep = [i for i, c in enumerate(cols) if not ov.get(c, {}).get("custom.hidden")]
    ax.axis("off")
    max_rows = max(3, int(panel["gridPos"]["h"] * 1.6) - 2)
    cells = [[_fmt(r[i], ov.get(cols[i], {}).get("unit")) for i in keep] for r in rows[:max_rows]]
    if not cells:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="gray")
        return
    tab = ax.table(cellText=cells, colLabels=[cols[i] for i in keep], loc="upper center", cellLoc="left")
    tab.auto_set_font_size(False)
    tab.set_fontsize(6.5)
    tab.scale(1, 1.05)
    for (r, _), cell in tab.get_celld().items():
        cell.set_edgecolor("#d0d0d0")
        if r == 0:
            cell.set_facecolor("#eef1f5")
            cell.set_text_props(weight="bold")
    for i, k in enumerate(keep):
        if "links" in ov.get(cols[k], {}):
            for r in range(1, len(cells) + 1):
                tab[r, i].get_text().set_color("#1f60c4")


def draw_stat(ax: Axes, panel: dict[str, Any], cols: list[str], rows: list[tuple[Any, ...]]) -> None:
    ax.axis("off")
    unit = panel["fieldConfig"]["defaults"].get("unit")
    v = rows[0][0] if rows else None
    text = _fmt(v, unit) if unit != "s" or v is None else f"{float(v):.2f} s"
    ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=20, color="#37872d", weight="bold")


def draw_bargauge(ax: Axes, panel: dict[str, Any], cols: list[str], rows: list[tuple[Any, ...]]) -> None:
    scale, label = _unit(panel)
    ov = _overrides(panel)
    vals = [float(v or 0) / scale for v in rows[0]] if rows else []
    colors = [_color(ov.get(c, {}), i) for i, c in enumerate(cols)]
    y = np.arange(len(cols))[::-1]
    ax.barh(y, vals, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels(cols, fontsize=7)
    for yi, v in zip(y, vals, strict=True):
        ax.text(v, yi, f" {v:.2f} {label}", va="center", fontsize=7)
    ax.set_xlim(0, max(vals + [1e-9]) * 1.3)
    ax.tick_params(labelsize=7)


def _annotation_spans(conn: psycopg.Connection, dash: dict[str, Any],
                      ctx: Context) -> list[tuple[datetime, datetime | None, str]]:
    spans = []
    for a in dash["annotations"]["list"]:
        if "target" not in a or not a.get("enable", True):
            continue
        col = GRAFANA_COLORS.get(a.get("iconColor", ""), a.get("iconColor", "gray"))
        cols, rows = _run(conn, a["target"]["rawSql"], ctx)
        for r in rows:
            d = dict(zip(cols, r, strict=True))
            spans.append((_t(d["time"]), _t(d["timeend"]) if d.get("timeend") else None, col))
    return spans


def render(conn: psycopg.Connection, dash: dict[str, Any], ctx: Context, out: Path) -> Path:
    panels = [p for p in all_panels(dash) if p["type"] != "row"]
    top = min(p["gridPos"]["y"] for p in panels)
    bottom = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    fig = plt.figure(figsize=(18, (bottom - top) * ROW_IN + 1.0))
    chosen = ", ".join(f"{k}={v[0]}" for k, v in ctx.variables.items() if len(v) == 1)
    fig.suptitle(f"{dash['title']}   ({chosen}; {ctx.time_from:%Y-%m-%d %H:%M}–{ctx.time_to:%H:%M} UTC)",
                 fontsize=11, x=0.01, y=0.998, ha="left", va="top")
    spans = _annotation_spans(conn, dash, ctx)
    H = bottom - top
    for p in panels:
        g = p["gridPos"]
        rect = (g["x"] / 24 + 0.035, 0.945 - (g["y"] - top + g["h"]) / H * 0.93 + 0.045,
                g["w"] / 24 - 0.05, g["h"] / H * 0.93 - 0.06)
        if p["type"] == "heatmap":  # room for the row names (ports, ranks) on the left
            rect = (rect[0] + 0.045, rect[1], rect[2] - 0.045, rect[3])
        ax = fig.add_axes(rect)
        ax.set_title(p["title"], fontsize=8.5, loc="left")
        data = [_run(conn, t["rawSql"], ctx) for t in p["targets"]]
        cols, rows = data[0]
        if p["type"] == "timeseries":
            draw_timeseries(ax, p, data, spans, ctx.interval_s)
        elif p["type"] == "heatmap":
            draw_heatmap(ax, p, cols, rows)
        elif p["type"] == "table":
            draw_table(ax, p, cols, rows)
        elif p["type"] == "stat":
            draw_stat(ax, p, cols, rows)
        elif p["type"] == "bargauge":
            draw_bargauge(ax, p, cols, rows)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def job_range(conn: psycopg.Connection, job: str) -> tuple[datetime, datetime]:
    row = conn.execute("SELECT min(start_ts), max(end_ts) FROM steps WHERE job = %s", (job,)).fetchone()
    lo, hi = row if row else (None, None)
    if lo is None or hi is None:
        raise SystemExit(f"job {job!r} has no steps in this database")
    return lo - timedelta(seconds=30), hi + timedelta(seconds=30)


def render_all(dsn: str, out_dir: Path, *, job: str | None = None, time_from: datetime | None = None,
               time_to: datetime | None = None, api: str = "http://localhost:8000",
               only: Sequence[str] = ()) -> list[Path]:
    dashboards = load_dashboards()
    with psycopg.connect(dsn, autocommit=True) as conn:
        if job is None:
            row = conn.execute("SELECT name FROM jobs ORDER BY updated_at DESC LIMIT 1").fetchone()
            if row is None:
                raise SystemExit("no job in this database")
            job = str(row[0])
        if time_from is None or time_to is None:
            time_from, time_to = job_range(conn, job)
        ts = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'timescaledb'").fetchone() is not None
        # only the chosen dashboards' variables: another's may need data this database lacks (#48: Fleet)
        chosen = {n: d for n, d in dashboards.items() if not only or n in only or d["uid"] in only}
        ctx = resolve_variables(conn, chosen, Context(time_from, time_to, {"job": [job], "api": [api]},
                                                      timescaledb=ts))
        return [render(conn, d, ctx, out_dir / f"{d['uid']}.png") for d in chosen.values()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn", required=True, help="database DSN (e.g. $(fabricscope db url))")
    ap.add_argument("--job", help="job to show (default: the most recently updated)")
    ap.add_argument("--from", dest="time_from", help="RFC 3339 start (default: the job's first step)")
    ap.add_argument("--to", dest="time_to", help="RFC 3339 end (default: the job's last step)")
    ap.add_argument("--out", type=Path, default=Path("docs/img"), help="output directory")
    ap.add_argument("--dashboard", action="append", default=[], help="file name or uid (repeatable)")
    args = ap.parse_args(argv)
    frm = datetime.fromisoformat(args.time_from) if args.time_from else None
    to = datetime.fromisoformat(args.time_to) if args.time_to else None
    for p in render_all(args.dsn, args.out, job=args.job, time_from=frm, time_to=to, only=args.dashboard):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
