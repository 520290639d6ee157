"""#18: the `fabricscope serve` process: SIGTERM stops the embedded PostgreSQL, the start warns when
authentication is off on a non-loopback address, and the scheduler's per-run lines stay out of INFO."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest

from fabricscope.service.db.embedded import EmbeddedPostgres
from tests.support import REPO, ServiceProcess, free_port, start_service


def _serve(tmp_path: Path, env: dict[str, str], *, host: str = "127.0.0.1", wait_s: float = 90) -> ServiceProcess:
    """`fabricscope serve` as a deployment starts it (start_service always listens on 127.0.0.1 and
    always names a DATABASE_URL); polled on 127.0.0.1 only."""
    port = free_port()
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICSCOPE_") and k != "DATABASE_URL"}
    full_env.update({"FABRICSCOPE_CORRELATE_INTERVAL_S": "0", "FABRICSCOPE_ALERT_INTERVAL_S": "0",
                     "FABRICSCOPE_DELIVERY_INTERVAL_S": "0", "FABRICSCOPE_RETENTION_INTERVAL_S": "0", **env})
    log = tmp_path / f"serve-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "fabricscope", "serve", "--host", host, "--port", str(port)],
                                cwd=REPO, env=full_env, stdout=out, stderr=subprocess.STDOUT)
    svc = ServiceProcess(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if httpx.get(f"{svc.url}/healthz", timeout=1).status_code == 200:
                return svc
        except httpx.HTTPError:
            time.sleep(0.2)
    svc.stop()
    raise RuntimeError(f"serve did not start:\n{svc.tail()}")


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_stops_the_embedded_postgres(tmp_path: Path) -> None:
    # Not under pytest's tmp root: it is 0700, and as root the embedded server runs as another user.
    data_dir = Path(tempfile.mkdtemp(prefix="fabricscope-sigterm-"))
    port = free_port()
    emb = EmbeddedPostgres(data_dir, port)
    try:
        svc = _serve(tmp_path, {"FABRICSCOPE_DATA_DIR": str(data_dir), "FABRICSCOPE_EMBEDDED_PORT": str(port)})
        try:
            postmaster = int((emb.pgdata / "postmaster.pid").read_text().split()[0])
            assert _running(postmaster)
            svc.proc.send_signal(signal.SIGTERM)  # what systemctl stop and docker stop send
            status = svc.proc.wait(60)
        finally:
            svc.stop()
        assert not _running(postmaster), svc.tail()
        assert status == 0, svc.tail()  # a clean stop, not a death by signal
        assert not (emb.pgdata / "postmaster.pid").exists()
        assert "embedded PostgreSQL stopped" in svc.log.read_text()
    finally:
        emb.stop()  # a no-op unless the test failed
        shutil.rmtree(data_dir, ignore_errors=True)


def test_no_auth_on_a_public_address_warns_at_start(database_url: str, tmp_path: Path,
                                                     service: ServiceProcess) -> None:
    svc = _serve(tmp_path, {"DATABASE_URL": database_url}, host="0.0.0.0")
    svc.stop()
    warning = [line for line in svc.log.read_text().splitlines() if "authentication is OFF" in line]
    assert warning and "WARNING" in warning[0] and "0.0.0.0" in warning[0], svc.tail()
    # On loopback (the session's service) there is nothing to warn about.
    assert "authentication is OFF" not in service.log.read_text()


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_scheduler_runs_are_logged_at_debug(database_url: str, tmp_path: Path, level: str) -> None:
    svc = start_service(database_url, tmp_path, env={"FABRICSCOPE_DELIVERY_INTERVAL_S": "0.2",
                                                     "FABRICSCOPE_LOG_LEVEL": level})
    try:
        time.sleep(3)  # the job runs every 0.2 s, plus up to 1 s of jitter
    finally:
        svc.stop()
    runs = [line for line in svc.log.read_text().splitlines() if "apscheduler.executors" in line]
    if level == "INFO":
        assert runs == [], runs[:4]
    else:  # still there for whoever asks for DEBUG
        assert runs and all(" DEBUG " in line for line in runs), runs[:4]
