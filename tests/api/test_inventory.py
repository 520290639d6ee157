"""Topology, jobs and raw queries against the real database."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from typer.testing import CliRunner

TOPO = {
    "devices": [
        {"name": "leaf1", "kind": "switch", "vendor": "arista"},
        {"name": "spine1", "kind": "switch"},
        {"name": "node07", "kind": "host", "interfaces": [{"name": "mlx5_2", "speed_bps": 4e11}]},
    ],
    "links": [
        {"a": "node07:mlx5_2", "b": "leaf1:Ethernet12", "speed_bps": 400e9},
        {"a": "leaf1:Ethernet49", "b": "spine1:Ethernet1"},
    ],
}


def test_topology_put_get_and_discovered_merge(api: httpx.Client) -> None:
    r = api.put("/v1/topology", json=TOPO)
    assert r.status_code == 200, r.text
    got = api.get("/v1/topology").json()
    assert [d["name"] for d in got["devices"]] == ["leaf1", "node07", "spine1"]
    assert got["devices"][0]["vendor"] == "arista"
    assert got["devices"][1]["interfaces"] == [{"name": "mlx5_2", "speed_bps": 4e11}]
    assert {(link["a"], link["b"]) for link in got["links"]} == {("node07:mlx5_2", "leaf1:Ethernet12"),
                                                                ("leaf1:Ethernet49", "spine1:Ethernet1")}
    # LLDP finds one known link (seen from the other side) and one new link.
    r = api.post("/v1/topology/links", json={"links": [{"a": "leaf1:Ethernet12", "b": "node07:mlx5_2"},
                                                       {"a": "leaf1:Ethernet50", "b": "spine1:Ethernet9"}]})
    assert r.status_code == 200 and r.json() == {"merged": 2}
    links = {(x["a"], x["b"]): x for x in api.get("/v1/topology").json()["links"]}
    assert len(links) == 3
    assert links[("node07:mlx5_2", "leaf1:Ethernet12")]["declared"] is True
    assert links[("node07:mlx5_2", "leaf1:Ethernet12")]["discovered"] is True
    assert links[("leaf1:Ethernet50", "spine1:Ethernet9")]["declared"] is False
    # Re-declaring the topology keeps discovered links.
    assert api.put("/v1/topology", json=TOPO).status_code == 200
    assert len(api.get("/v1/topology").json()["links"]) == 3


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"devices": [{"name": "x", "kind": "router"}]}, ["body", "devices", 0, "kind"]),
        ({"devices": [{"name": "a:b", "kind": "host"}]}, ["body", "devices", 0, "name"]),
        ({"devices": [{"name": "x", "kind": "host"}, {"name": "x", "kind": "host"}]}, ["body", "devices", 1, "name"]),
        ({"links": [{"a": "x:1", "b": "x:1"}]}, ["body", "links", 0, "b"]),
        ({"links": [{"a": "x:1"}]}, ["body", "links", 0, "b"]),
    ],
)
def test_bad_topology_is_422_naming_field(api: httpx.Client, body: dict, loc: list) -> None:  # type: ignore[type-arg]
    r = api.put("/v1/topology", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == loc


def test_job_placement_roundtrip(api: httpx.Client) -> None:
    job = f"llama-{uuid.uuid4().hex[:6]}"
    body = {"ranks": [{"rank": 0, "host": "node07", "gpu": "gpu3", "nic": "mlx5_2", "local_rank": 3},
                      {"rank": 1, "host": "node08", "gpu": "gpu0", "nic": "mlx5_0", "numa": 1}],
            "labels": {"team": "pretrain"}}
    r = api.put(f"/v1/jobs/{job}", json=body)
    assert r.status_code == 200, r.text
    got = api.get(f"/v1/jobs/{job}").json()
    assert got["ranks"][0] == {"rank": 0, "host": "node07", "gpu": "gpu3", "nic": "mlx5_2", "local_rank": 3}
    assert got["ranks"][1]["numa"] == 1
    assert got["labels"] == {"team": "pretrain"}
    assert job in [j["job"] for j in api.get("/v1/jobs").json()]
    assert api.get("/v1/jobs/no-such-job").status_code == 404
    r = api.put(f"/v1/jobs/{job}", json={"ranks": [{"rank": 0, "host": "a"}, {"rank": 0, "host": "b"}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "ranks", 1, "rank"]


def test_raw_query_values_rates_and_buckets(api: httpx.Client) -> None:
    src = f"leaf{uuid.uuid4().hex[:6]}:Ethernet3"
    t0 = float(int(time.time()) // 60 * 60 - 600)
    samples = [{"ts": t0 + 10 * i, "source": src, "metric": "tx_bytes_total", "value": 1000.0 * i}
               for i in range(12)]
    assert api.post("/v1/ingest/samples", json={"samples": samples}).status_code == 200
    frm = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 - 1))
    to = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0 + 200))
    raw = api.get(f"/v1/sources/{src}/metrics/tx_bytes_total", params={"from": frm, "to": to}).json()
    pts = raw["series"][0]["points"]
    assert len(pts) == 12 and pts[0]["rate"] is None and pts[5]["rate"] == pytest.approx(100.0)
    buck = api.get(f"/v1/sources/{src}/metrics/tx_bytes_total", params={"from": frm, "to": to, "step": 60}).json()
    bpts = buck["series"][0]["points"]
    assert len(bpts) == 2
    assert all(p["rate"] == pytest.approx(100.0) for p in bpts)
    assert api.get("/v1/sources/nope:x/metrics/tx_bytes_total").status_code == 404
    r = api.get(f"/v1/sources/{src}/metrics/rx_bytes_total")
    assert r.status_code == 404 and "rx_bytes_total" in r.json()["detail"]
    r = api.get(f"/v1/sources/{src}/metrics/tx_bytes_total", params={"from": "tomorrow"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "from"]
    r = api.get(f"/v1/sources/{src}/metrics/tx_bytes_total", params={"from": to, "to": frm})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "to"]


def test_topology_import_cli(tmp_path: Path, database_url: str, db_conn: psycopg.Connection,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from fabricscope import cli
    from fabricscope.service.settings import get_settings

    monkeypatch.setenv("DATABASE_URL", database_url)
    get_settings.cache_clear()
    try:
        good = Path(__file__).resolve().parents[2] / "docs" / "topology.example.yaml"
        res = CliRunner().invoke(cli.build_app("topology"), ["topology", "import", str(good)])
        assert res.exit_code == 0, res.output
        assert "imported 6 devices, 6 links" in res.output
        row = db_conn.execute("SELECT count(*) FROM links WHERE a = 'node01:mlx5_0' AND b = 'leaf1:Ethernet1'")
        assert row.fetchone() == (1,)
        bad = tmp_path / "bad.yaml"
        bad.write_text("devices:\n  - {name: x, kind: toaster}\n")
        res = CliRunner().invoke(cli.build_app("topology"), ["topology", "import", str(bad)])
        assert res.exit_code == 2
        assert "devices.0.kind" in res.output
    finally:
        get_settings.cache_clear()


def test_gzip_bodies_on_json_routes(api: httpx.Client) -> None:
    import gzip

    import orjson

    job = f"gz-{uuid.uuid4().hex[:6]}"
    body = gzip.compress(orjson.dumps({"ranks": [{"rank": 0, "host": "node01", "nic": "mlx5_0"}]}))
    r = api.put(f"/v1/jobs/{job}", content=body, headers={"Content-Encoding": "gzip",
                                                         "Content-Type": "application/json"})
    assert r.status_code == 200, r.text
    assert api.get(f"/v1/jobs/{job}").json()["ranks"][0]["nic"] == "mlx5_0"
    r = api.put(f"/v1/jobs/{job}", content=b"not gzip", headers={"Content-Encoding": "gzip",
                                                                "Content-Type": "application/json"})
    assert r.status_code == 422
