"""Data access for topology and jobs (keyword-only functions over a psycopg connection)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from fabricscope.core.errors import FabricscopeError
from fabricscope.service import contract


class JobLabelsTooLarge(FabricscopeError):
    """Labels are merged over registrations: each PUT is bounded, so the merged set is checked too."""


def replace_topology(conn: psycopg.Connection, *, devices: list[dict[str, Any]],
                     links: list[dict[str, Any]]) -> dict[str, int]:
    """Replace the declared topology. Discovered links are kept (only their declared flag drops)."""
    with conn.transaction():
        names = [d["name"] for d in devices]
        conn.execute("DELETE FROM devices WHERE NOT (name = ANY(%s))", (names,))
        for d in devices:
            attrs = {k: v for k, v in d.items() if k not in ("name", "kind", "interfaces")}
            conn.execute(
                "INSERT INTO devices (name, kind, attrs) VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE"
                " SET kind = EXCLUDED.kind, attrs = EXCLUDED.attrs, updated_at = now()",
                (d["name"], d["kind"], Jsonb(attrs)),
            )
            conn.execute("DELETE FROM interfaces WHERE device = %s", (d["name"],))
            for itf in d.get("interfaces") or []:
                extra = {k: v for k, v in itf.items() if k not in ("name", "speed_bps")}
                conn.execute("INSERT INTO interfaces (device, name, speed_bps, attrs) VALUES (%s, %s, %s, %s)"
                             " ON CONFLICT DO NOTHING", (d["name"], itf["name"], itf.get("speed_bps"), Jsonb(extra)))
        conn.execute("DELETE FROM links WHERE declared AND NOT discovered")
        conn.execute("UPDATE links SET declared = false")
        for link in links:
            conn.execute(
                "INSERT INTO links (a, b, speed_bps, declared, discovered) VALUES (%s, %s, %s, true, false)"
                " ON CONFLICT (LEAST(a, b), GREATEST(a, b)) DO UPDATE"
                " SET declared = true, speed_bps = COALESCE(EXCLUDED.speed_bps, links.speed_bps)",
                (link["a"], link["b"], link.get("speed_bps")),
            )
    return {"devices": len(devices), "links": len(links)}


def merge_links(conn: psycopg.Connection, *, links: list[dict[str, Any]], discovered: bool) -> int:
    """Add or refresh links (LLDP discovery); declared links stay declared."""
    with conn.transaction():
        for link in links:
            conn.execute(
                "INSERT INTO links (a, b, speed_bps, declared, discovered, last_seen)"
                " VALUES (%s, %s, %s, %s, %s, now())"
                " ON CONFLICT (LEAST(a, b), GREATEST(a, b)) DO UPDATE SET"
                " discovered = links.discovered OR EXCLUDED.discovered, last_seen = now(),"
                " speed_bps = COALESCE(EXCLUDED.speed_bps, links.speed_bps)",
                (link["a"], link["b"], link.get("speed_bps"), not discovered, discovered),
            )
    return len(links)


def get_topology(conn: psycopg.Connection) -> dict[str, Any]:
    cur = conn.cursor(row_factory=dict_row)
    devices = cur.execute("SELECT name, kind, attrs FROM devices ORDER BY name").fetchall()
    itfs = cur.execute("SELECT device, name, speed_bps, attrs FROM interfaces ORDER BY device, name").fetchall()
    by_dev: dict[str, list[dict[str, Any]]] = {}
    for i in itfs:
        entry = {"name": i["name"], **({"speed_bps": i["speed_bps"]} if i["speed_bps"] is not None else {}),
                 **i["attrs"]}
        by_dev.setdefault(i["device"], []).append(entry)
    out_devices = []
    for d in devices:
        entry = {"name": d["name"], "kind": d["kind"], **d["attrs"]}
        if d["name"] in by_dev:
            entry["interfaces"] = by_dev[d["name"]]
        out_devices.append(entry)
    links = cur.execute("SELECT a, b, speed_bps, declared, discovered FROM links ORDER BY a, b").fetchall()
    return {"devices": out_devices, "links": links}


def put_job(conn: psycopg.Connection, *, job: str, ranks: list[dict[str, Any]], labels: dict[str, Any]) -> None:
    with conn.transaction():
        row = conn.execute(
            "INSERT INTO jobs (name, labels) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE"
            " SET labels = jobs.labels || EXCLUDED.labels, updated_at = now() RETURNING octet_length(labels::text)",
            (job, Jsonb(labels)),
        ).fetchone()
        if row is not None and row[0] > contract.MAX_OBJECT_BYTES:  # raising rolls the merge back
            raise JobLabelsTooLarge(f"the job's labels, merged with those already stored, would be {row[0]} bytes "
                                    f"as JSON; at most {contract.MAX_OBJECT_BYTES}")
        for r in ranks:
            attrs = {k: v for k, v in r.items() if k not in ("rank", "host", "local_rank", "gpu", "nic", "locality")}
            locality = r.get("locality")  # its own column (migration 0006), read by the placement audit
            conn.execute(
                "INSERT INTO job_ranks (job, rank, host, local_rank, gpu, nic, attrs, locality)"
                " VALUES (%s,%s,%s,%s,%s,%s,%s,%s)"
                " ON CONFLICT (job, rank) DO UPDATE SET host = EXCLUDED.host, local_rank = EXCLUDED.local_rank,"
                " gpu = EXCLUDED.gpu, nic = EXCLUDED.nic, attrs = EXCLUDED.attrs, locality = EXCLUDED.locality",
                (job, r["rank"], r["host"], r.get("local_rank"), r.get("gpu"), r.get("nic"), Jsonb(attrs),
                 Jsonb(locality) if locality is not None else None),
            )


def get_job(conn: psycopg.Connection, *, job: str) -> dict[str, Any] | None:
    cur = conn.cursor(row_factory=dict_row)
    row = cur.execute("SELECT name, labels, created_at, updated_at FROM jobs WHERE name = %s", (job,)).fetchone()
    if row is None:
        return None
    ranks = cur.execute(
        "SELECT rank, host, local_rank, gpu, nic, attrs, locality FROM job_ranks WHERE job = %s ORDER BY rank", (job,)
    ).fetchall()
    out_ranks = []
    for r in ranks:
        attrs = r.pop("attrs")
        out_ranks.append({k: v for k, v in {**r, **attrs}.items() if v is not None})
    return {"job": row["name"], "labels": row["labels"], "ranks": out_ranks,
            "created_at": row["created_at"], "updated_at": row["updated_at"]}


def list_jobs(conn: psycopg.Connection) -> list[dict[str, Any]]:
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute(
        "SELECT j.name AS job, j.labels, j.created_at, j.updated_at, count(r.rank) AS ranks"
        " FROM jobs j LEFT JOIN job_ranks r ON r.job = j.name GROUP BY j.name ORDER BY j.updated_at DESC"
    ).fetchall()
