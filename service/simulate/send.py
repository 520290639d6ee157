"""Deliver a scenario: through the real HTTP ingest API (`HttpSink`), or straight into the database
(`DirectSink`, for development and benchmarks of the engine alone). Both take docs/API.md payloads."""

from __future__ import annotations

import io
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import orjson
import pandas as pd

from fabricscope.collectors.sinks.http import HttpTransport
from fabricscope.core import wire
from fabricscope.core.backoff import backoff_delay
from fabricscope.core.rates import series_rates
from fabricscope.service.db.copybin import samples_copy_payload, stored_us
from fabricscope.service.db.frames import INCREMENT_METRICS, SCORED_METRICS, write_frames
from fabricscope.service.db.writer import STEP_PHASE_COLUMNS, phase_values
from fabricscope.service.simulate.generator import Scenario

MAX_BATCH = 5000


class ScenarioSink(Protocol):
    """Takes a scenario's ready-made docs/API.md bodies, synchronously (errors raise), with the
    scenario's own batch ids so a re-send is idempotent. Collectors use ``make_sink`` instead."""

    def put_topology(self, body: dict[str, Any]) -> None: ...
    def put_job(self, job: str, body: dict[str, Any]) -> None: ...
    def post(self, kind: str, body: dict[str, Any]) -> None: ...


class HttpSink:
    """Sends through the collectors' HTTP transport, waiting out outages (503 + Retry-After)."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 60.0, attempts: int = 8) -> None:
        self.transport = HttpTransport(url, token=token, timeout_s=timeout)
        self.attempts = attempts

    def _send(self, method: str, path: str, body: dict[str, Any], *, gzipped: bool) -> None:
        data = orjson.dumps(body)
        data = wire.gzip_body(data) if gzipped else data
        for attempt in range(1, self.attempts + 1):
            out = self.transport.request(method, path, data, gzipped=gzipped)
            if out.kind == "ok":
                return
            if out.kind != "retry" or attempt == self.attempts:
                raise RuntimeError(f"{method} {path}: {out.kind}: {out.reason}")
            time.sleep(out.retry_after if out.retry_after is not None else backoff_delay(attempt, base=0.5, cap=10))

    def put_topology(self, body: dict[str, Any]) -> None:
        self._send("PUT", "/v1/topology", body, gzipped=False)

    def put_job(self, job: str, body: dict[str, Any]) -> None:
        self._send("PUT", f"/v1/jobs/{urllib.parse.quote(job, safe='')}", body, gzipped=False)

    def post(self, kind: str, body: dict[str, Any]) -> None:
        self._send("POST", f"/v1/ingest/{kind}", body, gzipped=True)

    def close(self) -> None:
        self.transport.close()


def _copy(cur: Any, table: str, columns: list[str], df: pd.DataFrame) -> None:
    buf = io.StringIO()
    df.to_csv(buf, index=False, header=False, na_rep="\\N")
    buf.seek(0)
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN WITH (FORMAT csv, NULL '\\N')") as cp:
        cp.write(buf.read())


class DirectSink:
    """Writes payloads with COPY into the schema (rates computed with fabricscope.core.rates)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def put_topology(self, body: dict[str, Any]) -> None:
        with self.conn.cursor() as cur:
            for d in body.get("devices", []):
                attrs = {k: v for k, v in d.items() if k not in ("name", "kind")}
                cur.execute("INSERT INTO devices (name, kind, attrs) VALUES (%s, %s, %s) ON CONFLICT (name) "
                            "DO UPDATE SET kind = EXCLUDED.kind, attrs = EXCLUDED.attrs",
                            (d["name"], d["kind"], json.dumps(attrs)))
            cur.execute("DELETE FROM links WHERE declared AND NOT discovered")
            cur.executemany("INSERT INTO links (a, b, speed_bps) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                            [(x["a"], x["b"], x.get("speed_bps")) for x in body.get("links", [])])

    def put_job(self, job: str, body: dict[str, Any]) -> None:
        with self.conn.cursor() as cur:
            cur.execute("INSERT INTO jobs (name, labels) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE "
                        "SET labels = EXCLUDED.labels, updated_at = now()", (job, json.dumps(body.get("labels", {}))))
            cur.execute("DELETE FROM job_ranks WHERE job = %s", (job,))
            cur.executemany("INSERT INTO job_ranks (job, rank, host, gpu, nic) VALUES (%s, %s, %s, %s, %s)",
                            [(job, r["rank"], r["host"], r.get("gpu"), r.get("nic")) for r in body["ranks"]])

    def _series_ids(self, cur: Any, df: pd.DataFrame) -> np.ndarray:
        keys = df[["source", "metric", "labels"]].drop_duplicates()
        for src in keys["source"].unique():
            dev, _, iface = src.partition(":")
            cur.execute("INSERT INTO sources (name, device, interface) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                        (src, dev, iface or None))
        for m in keys["metric"].unique():
            kind = "counter" if m.endswith("_total") else "gauge"
            cur.execute("INSERT INTO metrics (name, kind) VALUES (%s, %s) ON CONFLICT DO NOTHING", (m, kind))
        cur.executemany(
            "INSERT INTO series (source_id, metric_id, labels) SELECT s.id, m.id, %s::jsonb FROM sources s, metrics m "
            "WHERE s.name = %s AND m.name = %s ON CONFLICT DO NOTHING",
            [(lab, s, m) for s, m, lab in keys.itertuples(index=False)])
        cur.execute("SELECT se.id, s.name, m.name, se.labels::text FROM series se "
                    "JOIN sources s ON s.id = se.source_id JOIN metrics m ON m.id = se.metric_id "
                    "WHERE s.name = ANY(%s)", (list(keys["source"].unique()),))
        ids = {(s, m, json.dumps(json.loads(lab), sort_keys=True)): i for i, s, m, lab in cur.fetchall()}
        return np.array([ids[k] for k in zip(df["source"], df["metric"], df["labels"], strict=False)])

    def post(self, kind: str, body: dict[str, Any]) -> None:
        with self.conn.cursor() as cur:
            if kind == "samples":
                df = pd.DataFrame(body["samples"])
                labels = df["labels"] if "labels" in df else pd.Series([None] * len(df))
                df["labels"] = [json.dumps(x if isinstance(x, dict) else {}, sort_keys=True) for x in labels]
                df["series_id"] = self._series_ids(cur, df)
                counter = df["metric"].str.endswith("_total").to_numpy()
                cur.execute("SELECT DISTINCT ON (series_id) series_id, extract(epoch FROM ts), value FROM samples "
                            "WHERE series_id = ANY(%s) ORDER BY series_id, ts DESC",
                            (list(map(int, df["series_id"].unique())),))
                last = {int(i): (float(t), float(v)) for i, t, v in cur.fetchall()}
                sid = df["series_id"].to_numpy(np.int64)
                lt = np.array([last.get(int(i), (np.nan, np.nan))[0] for i in sid])
                lv = np.array([last.get(int(i), (np.nan, np.nan))[1] for i in sid])
                order, rates = series_rates(sid, df["ts"].to_numpy(float), df["value"].to_numpy(float), lt, lv)
                ts, sid = df["ts"].to_numpy(float)[order], sid[order]
                value, rate = df["value"].to_numpy(float)[order], np.where(counter[order], rates, np.nan)
                with cur.copy("COPY samples (ts, series_id, value, rate) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.write(samples_copy_payload(ts, sid, value, rate))
                increment = counter[order] & df["metric"].isin(INCREMENT_METRICS).to_numpy()[order]
                write_frames(cur, stored_us(ts), sid, value, rate, counter[order], increment,  # as ingest does
                             is_scored=df["metric"].isin(SCORED_METRICS).to_numpy()[order])
            elif kind == "steps":
                df = pd.DataFrame(body["steps"])
                out = pd.DataFrame({"job": body["job"], "rank": df["rank"], "step": df["step"],
                                    "start_ts": pd.to_datetime(df["start"], unit="s", utc=True),
                                    "end_ts": pd.to_datetime(df["end"], unit="s", utc=True),
                                    "duration_s": df["end"] - df["start"],
                                    "phases": [json.dumps(p) for p in df["phases"]]})
                phase_cols = pd.DataFrame([phase_values(p) for p in df["phases"]], index=out.index,
                                          columns=list(STEP_PHASE_COLUMNS.values()), dtype=float)
                out = pd.concat([out, phase_cols], axis=1)
                _copy(cur, "steps", list(out.columns), out)
            elif kind == "collectives":
                df = pd.DataFrame(body["collectives"])
                out = pd.DataFrame({"job": body["job"], "rank": df["rank"], "step": df["step"], "seq": df["seq"],
                                    "op": df["op"], "bytes": df["bytes"],
                                    "start_ts": pd.to_datetime(df["start"], unit="s", utc=True),
                                    "end_ts": pd.to_datetime(df["end"], unit="s", utc=True),
                                    "duration_s": df["end"] - df["start"], "group_name": df["group"],
                                    "group_size": df["group_size"]})
                _copy(cur, "collectives", list(out.columns), out)
            elif kind == "events":
                cur.executemany("INSERT INTO events (kind, source, job, start_ts, end_ts, attrs) VALUES "
                                "(%s, %s, %s, to_timestamp(%s), to_timestamp(%s), %s)",
                                [(e["kind"], e["source"], e.get("job"), e["start"], e.get("end"),
                                  json.dumps(e.get("attrs", {}))) for e in body["events"]])


def send_scenario(sink: ScenarioSink, sc: Scenario, *, batch: int = MAX_BATCH, topology: bool = True,
                  progress: Callable[[str], None] | None = None) -> dict[str, int]:
    """Topology, rank placement, then telemetry and timings in time order; idempotent batch ids."""
    if topology:
        sink.put_topology(sc.topology_body())
    sink.put_job(sc.job, sc.job_body())
    counts = {"samples": 0, "steps": 0, "collectives": 0, "events": 0}
    for i, b in enumerate(sc.sample_batches(batch)):
        sink.post("samples", {"batch_id": f"sim-{sc.job}-samples-{i}", "samples": b})
        counts["samples"] += len(b)
    for kind, rows in (("steps", sc.steps_payload()), ("collectives", sc.collectives_payload())):
        for i in range(0, len(rows), batch):
            sink.post(kind, {"job": sc.job, "batch_id": f"sim-{sc.job}-{kind}-{i}", kind: rows[i:i + batch]})
        counts[kind] = len(rows)
    ev = sc.events_payload()
    for i in range(0, len(ev), batch):
        sink.post("events", {"batch_id": f"sim-{sc.job}-events-{i}", "events": ev[i:i + batch]})
    counts["events"] = len(ev)
    if progress:
        progress(f"sent {sc.job}: {counts}")
    return counts
