"""Job labels the hook adds at registration: versions, world size, parallelism env (#19).

A real HTTP receiver records the hook's `PUT /v1/jobs/{job}`; torch is the real CPU build."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricscope.collectors.training import Recorder
from fabricscope.collectors.training.joblabels import nccl_version_string
from tests.sinks.receiver import Receiver
from tests.training.launch import REPO, free_port


@pytest.fixture
def recv() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def _labels_put(recv: Receiver, rec: Recorder) -> dict[str, Any]:
    with rec.step(0):
        pass
    rec.flush(5)
    puts = [r for r in recv.requests if r.method == "PUT"]
    rec.close()
    assert len(puts) == 1, puts
    labels: dict[str, Any] = puts[0].body.get("labels", {})
    return labels


def test_env_parallelism_and_world_size_without_importing_torch(recv: Receiver, tmp_path: Path) -> None:
    """A fresh interpreter that never imported torch: env labels only, and torch stays unimported."""
    code = f"""
import json, sys
from fabricscope.training import Recorder
env = {{"WORLD_SIZE": "16", "TENSOR_MODEL_PARALLEL_SIZE": "2", "PP_SIZE": "4", "CP_SIZE": "x",
        "DATA_PARALLEL_SIZE": "0", "NCCL_VERSION": "2.21.5"}}
rec = Recorder({recv.url!r}, "envjob", rank=0, env=env, spool={str(tmp_path)!r}, collectives=False,
               flush_interval_s=0.05).start()
rec.flush(5)
rec.close()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "torch")))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert json.loads(out.stdout) == []
    (put,) = [r for r in recv.requests if r.method == "PUT"]
    # CP_SIZE "x" and DATA_PARALLEL_SIZE "0" state no size: left out, never guessed
    assert put.body["labels"] == {"world_size": "16", "tp": "2", "pp": "4", "nccl_version": "2.21.5"}


def test_torch_versions_and_world_size_from_the_process_group(recv: Receiver, tmp_path: Path) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        rec = Recorder(recv.url, "torchjob", rank=0, env={}, spool=tmp_path, collectives=False,
                       flush_interval_s=0.05).start()
        labels = _labels_put(recv, rec)
    finally:
        dist.destroy_process_group()
    want = {"torch_version": torch.__version__, "world_size": "1"}
    if torch.version.cuda:
        want["cuda_version"] = torch.version.cuda
    if torch.cuda.is_available():
        want["nccl_version"] = nccl_version_string(torch.cuda.nccl.version()) or ""
    assert labels == want


def test_user_labels_win_over_detected_ones(recv: Receiver, tmp_path: Path) -> None:
    import torch  # noqa: F401 - detected labels need torch in the process

    rec = Recorder(recv.url, "userjob", rank=0, env={"WORLD_SIZE": "8", "TP_SIZE": "2"}, spool=tmp_path,
                   collectives=False, flush_interval_s=0.05,
                   labels={"torch_version": "2.5.0-custom", "tp": "4", "model": "llama-8b"}).start()
    labels = _labels_put(recv, rec)
    assert labels["torch_version"] == "2.5.0-custom" and labels["tp"] == "4" and labels["model"] == "llama-8b"
    assert labels["world_size"] == "8"


def test_a_failing_torch_query_never_reaches_the_loop(recv: Receiver, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def broken() -> bool:
        raise RuntimeError("CUDA driver initialization failed")

    monkeypatch.setattr(torch.cuda, "is_available", broken)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    rec = Recorder(recv.url, "brokenjob", rank=0, env={}, spool=tmp_path, collectives=False,
                   flush_interval_s=0.05).start()
    labels = _labels_put(recv, rec)
    assert labels == {"torch_version": torch.__version__, "cuda_version": "12.4"}
    assert rec.stats["errors"] == 0


def test_detection_can_be_switched_off(recv: Receiver, tmp_path: Path) -> None:
    rec = Recorder(recv.url, "offjob", rank=0, env={"FABRICSCOPE_JOB_LABELS": "0", "WORLD_SIZE": "4"},
                   spool=tmp_path, collectives=False, flush_interval_s=0.05, labels={"model": "m"}).start()
    assert _labels_put(recv, rec) == {"model": "m"}


@pytest.mark.parametrize(("raw", "want"), [
    ((2, 21, 5), "2.21.5"), ((2, 27, 3, "a0"), "2.27.3-a0"), ((2, 18, 1, ""), "2.18.1"),
    (2708, "2.7.8"), (21905, "2.19.5"), (0, None), ("2.21", None)])
def test_nccl_version_forms_of_old_and_new_torch(raw: Any, want: str | None) -> None:
    assert nccl_version_string(raw) == want
