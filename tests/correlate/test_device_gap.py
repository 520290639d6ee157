"""A GPU's capability in a collector's gap (#15, missing series): 777 run 7 step 28 read its PCIe
link's width at 4 while the series of the link's maximum width had a gap of several readings, so
the step had no reference to compare the width with and its PCIe downtrain was named after a link
that had flapped a minute before. A capability holds between readings: the reference is then its
value in the GPU's own past (devices.judge, queries.DEVICE_SQL, device_probe.origin_cover). Through
the real ingest API and database; the gap is the maximum's readings deleted, as a collector that did
not send them."""

from __future__ import annotations

from datetime import datetime

import numpy as np
import psycopg

from fabricscope.service.correlate import AttributionEngine
from fabricscope.service.correlate.device_probe import device_findings, origin_cover
from fabricscope.service.correlate.devices import GPU_RULES
from fabricscope.service.simulate.faults import make_fault
from fabricscope.service.simulate.generator import generate
from fabricscope.service.simulate.topology import ClusterSpec, build_cluster
from tests.correlate.scenarios import post

SPEC = ClusterSpec(hosts=4, gpus_per_host=4, nics_per_host=2, leaves=2, spines=2)
STEPS, START, LENGTH = 40, 20, 10


def _window(engine: AttributionEngine, conn: psycopg.Connection, job: str, step: int) -> tuple[float, float]:
    row = next(r for r in engine.list_steps(conn, job=job) if r["step"] == step)
    ws = datetime.fromisoformat(str(row["start"])).timestamp()
    return ws, ws + float(row["duration_s"])


def test_a_width_in_its_maximums_gap_is_judged_against_the_maximum_read_before(
        service_url: str, db_conn: psycopg.Connection) -> None:
    f = make_fault(build_cluster(SPEC), "pcie_downtrain", start_step=START, steps=LENGTH, severity=0.3,
                   variant="width", rng=np.random.default_rng(3))
    sc = post(service_url, generate(SPEC, job="device-gap", steps=STEPS, faults=[f], seed=3, t0=1.793e9,
                                    interval=2.0))
    gpu, step = f.component, START + LENGTH // 2
    engine = AttributionEngine()
    ws, we = _window(engine, db_conn, sc.job, step)
    # the maximum's readings from 40 s before the step to 40 s after it: none in the step nor in the
    # MAX_SAMPLE_GAP_S either side of it; its readings before that stay (the GPU's own past)
    gone = db_conn.execute(
        "DELETE FROM samples s USING series se, sources src, metrics m WHERE s.series_id = se.id "
        "AND se.source_id = src.id AND se.metric_id = m.id AND src.name = %s AND m.name = 'pcie_link_width_max' "
        "AND s.ts > to_timestamp(%s) AND s.ts <= to_timestamp(%s)", (gpu, ws - 40.0, we + 40.0)).rowcount
    db_conn.commit()
    assert gone >= 30
    found = device_findings(db_conn, [gpu], GPU_RULES, (ws, we), None)
    width = [r for r in found.get(gpu, []) if r["metric"] == "pcie_link_width"]
    assert width and width[0]["value"] < width[0]["baseline"] == 16.0, found
    # the state's cover of the step (a fault's first and last steps) reads the same past
    assert origin_cover(db_conn, gpu, (ws, we)) > 0.5 * (we - ws)
    a = engine.attribute_step(db_conn, job=sc.job, step=step, store=False)
    assert a is not None and a["slow"] and (a["layer"], a["component"]) == ("compute", gpu), a
    assert any(e["source"] == gpu and e["metric"] == "pcie_link_width" for e in a["evidence"]), a
