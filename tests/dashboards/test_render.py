"""tools/render_dashboards.py draws every dashboard from the simulated cluster.

`FABRICSCOPE_DOC_IMAGES=1 pytest tests/dashboards/test_render.py` also rewrites docs/img/*.png.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.dashboards.conftest import JOB, DashEnv
from tools.grafana_sql import load_dashboards
from tools.render_dashboards import render_all

DOCS_IMG = Path(__file__).resolve().parent.parent.parent / "docs" / "img"


@pytest.mark.slow
def test_every_dashboard_is_drawn(dash_env: DashEnv, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "img"
    paths = render_all(dash_env.url, out, job=JOB, time_from=dash_env.time_from, time_to=dash_env.time_to,
                       api=dash_env.api)
    assert sorted(p.name for p in paths) == sorted(f"{d['uid']}.png" for d in load_dashboards().values())
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000, p  # a picture, not an empty canvas
    if os.environ.get("FABRICSCOPE_DOC_IMAGES") == "1":  # Capacity spans days: test_capacity.py draws it
        render_all(dash_env.url, DOCS_IMG, job=JOB, time_from=dash_env.time_from, time_to=dash_env.time_to,
                   api=dash_env.api, only=[n for n in load_dashboards() if n != "capacity.json"])


def test_committed_doc_images_exist() -> None:
    for d in load_dashboards().values():
        assert (DOCS_IMG / f"{d['uid']}.png").is_file(), f"docs/img/{d['uid']}.png missing (see module docstring)"
