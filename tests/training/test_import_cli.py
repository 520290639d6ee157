"""`fabricscope import ...` against the real service and database."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import psycopg
from typer.testing import CliRunner

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.collectors.training.importers.cli import import_app
from tests.training.launch import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training"
runner = CliRunner()


def test_kineto_import_lands_steps_and_collectives(service_url: str, db_conn: psycopg.Connection) -> None:
    job = f"kineto-{uuid.uuid4().hex[:8]}"
    res = runner.invoke(import_app, ["kineto", str(FIXTURES / "kineto-hta-nccl-data" / "input.json.gz"),
                                     "--job", job, "--url", service_url])
    assert res.exit_code == 0, res.output
    assert "parsed 3 steps and 21 collectives" in res.output
    steps = db_conn.execute("SELECT step, round(duration_s::numeric, 6) FROM steps WHERE job = %s ORDER BY step",
                            (job,)).fetchall()
    assert [(s, float(d)) for s, d in steps] == [(4, 0.222442), (5, 0.219727), (6, 0.224936)]
    ops = db_conn.execute("SELECT op, count(*), sum(bytes) FROM collectives WHERE job = %s GROUP BY op ORDER BY op",
                          (job,)).fetchall()
    assert [(op, n) for op, n, _ in ops] == [("all_reduce", 15), ("broadcast", 6)]


def test_inspector_import_with_placement_and_a_bad_file(service_url: str, db_conn: psycopg.Connection,
                                                        tmp_path: Path) -> None:
    job = f"insp-{uuid.uuid4().hex[:8]}"
    shutil.copy(FIXTURES / "nccl-inspector-two-records" / "input.json", tmp_path / "rank-logs.json")
    (tmp_path / "broken.json").write_text('{"header": ')
    res = runner.invoke(import_app, ["nccl-inspector", str(tmp_path), "--job", job, "--url", service_url])
    assert res.exit_code == 1  # the broken file is reported ...
    assert "broken.json" in res.output
    rows = db_conn.execute("SELECT rank, op, seq, bytes FROM collectives WHERE job = %s ORDER BY rank",
                           (job,)).fetchall()
    assert rows == [(2, "all_reduce", 1407, 17179869184), (4, "reduce_scatter", 1231, 2147483648)]  # ... the rest kept
    ranks = db_conn.execute("SELECT rank, host FROM job_ranks WHERE job = %s ORDER BY rank", (job,)).fetchall()
    assert ranks == [(2, "example-hostname"), (4, "example-hostname")]


def test_spool_replay_command(service_url: str, db_conn: psycopg.Connection, tmp_path: Path) -> None:
    job = f"spool-{uuid.uuid4().hex[:8]}"
    spool = tmp_path / "left.jsonl"
    s = HttpSender(f"http://127.0.0.1:{free_port()}", spool_path=spool, max_retries=0)  # nobody there
    for i in range(4):
        s.submit("steps", {"rank": 0, "step": i, "start": 1.7e9 + i, "end": 1.7e9 + i + 0.5}, job=job)
    s.close(2)
    assert s.stats["spooled"] == 4
    res = runner.invoke(import_app, ["spool", str(spool), "--url", service_url])
    assert res.exit_code == 0, res.output
    assert db_conn.execute("SELECT count(*) FROM steps WHERE job = %s", (job,)).fetchone() == (4,)
    res = runner.invoke(import_app, ["spool", str(spool), "--url", service_url])  # nothing left, no dups
    assert res.exit_code == 0
    assert db_conn.execute("SELECT count(*) FROM steps WHERE job = %s", (job,)).fetchone() == (4,)
