"""`fabricscope compare A B`: GET /v1/jobs/{a}/compare/{b} from a running API, printed for people
(or as the JSON answer with --json)."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import httpx
import typer


def render(out: dict[str, Any]) -> str:
    """The comparison as text: the gap, what explains it (with numbers), then the details."""
    lines = [f"{out['a']} -> {out['b']}: median step {out['median_step_s']['a']:.3f} s -> "
             f"{out['median_step_s']['b']:.3f} s ({out['gap_s']:+.3f} s"
             + (f", {out['gap_ratio'] * 100:+.1f} %)" if out.get("gap_ratio") is not None else ")")]
    lines += [f"warning: {w}" for w in out["warnings"]]
    lines.append("explained by:")
    for e in out["explanations"]:
        share = f" ({e['share_of_gap'] * 100:.0f} % of the gap)" if e.get("share_of_gap") is not None else ""
        lines.append(f"  {e['phase']:<13} {e['effect_s']:+.3f} s{share}  {e['kind']}: "
                     + ("; ".join(e["differences"]) or "-"))
    lines.append(f"  residual      {out['residual_s']:+.3f} s")
    lines.append("phases (median s, a -> b): " + ", ".join(
        f"{p['phase']} {p['a_s']:.3f} -> {p['b_s']:.3f}" for p in out["phases"]))
    for c in out["collectives"]:
        a, b = c["a"] or {}, c["b"] or {}
        lines.append(f"collective {c['op']} {c['bucket']} B: p50 {a.get('p50_s', float('nan')):.4f} -> "
                     f"{b.get('p50_s', float('nan')):.4f} s, p99 {a.get('p99_s', float('nan')):.4f} -> "
                     f"{b.get('p99_s', float('nan')):.4f} s")
    for f in out["busbw_fraction"]:
        lines.append(f"busbw fraction of acceptance {f['op']} {f['bucket']} B on {f['group_size']}: {f['a']} -> "
                     f"{f['b']}")
    for x in out["labels"]:
        lines.append(f"label {x['label']}: {x['a']} -> {x['b']}")
    for what, d in out["placement"].items():
        if d["only_a"] or d["only_b"]:
            lines.append(f"{what} only in {out['a']}: {', '.join(d['only_a']) or '-'}; only in {out['b']}: "
                         f"{', '.join(d['only_b']) or '-'}")
    for x in out["blamed"]:
        lines.append(f"blamed only in run {x['run']}: {x['component']} ({x['layer']}), {x['lost_s']:.3f} s over "
                     f"{x['slow_steps']} slow steps")
    return "\n".join(lines)


def compare_command(
    a: Annotated[str, typer.Argument(help="The reference run (job name)")],
    b: Annotated[str, typer.Argument(help="The run compared with it")],
    url: Annotated[str, typer.Option(envvar="FABRICSCOPE_URL", help="API base URL")] = "http://127.0.0.1:8080",
    token: Annotated[str | None, typer.Option(envvar="FABRICSCOPE_TOKEN", help="Bearer token (read)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the API's JSON answer")] = False,
) -> None:
    """Why is run B slower (or faster) than run A: phases, collectives, versions, placement, components."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        r = httpx.get(f"{url.rstrip('/')}/v1/jobs/{quote(a, safe='')}/compare/{quote(b, safe='')}",
                      headers=headers, timeout=60)
    except httpx.HTTPError as exc:
        typer.secho(f"compare: cannot reach {url}: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from exc
    if r.status_code != 200:
        typer.secho(f"compare: {r.status_code} {r.text[:500]}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1)
    typer.echo(json.dumps(r.json(), indent=2) if as_json else render(r.json()))
