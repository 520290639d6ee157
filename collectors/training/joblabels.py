"""Job labels the hook detects at start: framework versions, world size, parallelism sizes.

Trends across jobs (``GET /v1/trends?by=...``) group and annotate by these labels, so a change of
torch or NCCL version, or of the parallelism layout, is visible without the user labelling anything.

Only what the process states is reported, never guessed:

- ``torch_version`` (``torch.__version__``), ``cuda_version`` (``torch.version.cuda``, absent on a
  CPU build) and ``nccl_version`` (``torch.cuda.nccl.version()``, asked only when
  ``torch.cuda.is_available()``; the NGC containers' ``NCCL_VERSION`` variable otherwise) — read
  only when the training script has imported torch itself: this module never imports it.
- ``world_size``: ``WORLD_SIZE`` (torchrun), ``SLURM_NTASKS``, ``OMPI_COMM_WORLD_SIZE``,
  ``PMI_SIZE``, else ``torch.distributed.get_world_size()`` once the process group exists.
- ``tp``/``pp``/``dp``/``cp``/``ep``: the first of :data:`PARALLEL_ENV` that holds an integer.
  Megatron-LM, DeepSpeed and torchtitan take these sizes as arguments or config, not from the
  environment; launch scripts commonly export them under the names listed. A size that no variable
  states is left out (``dp`` is not derived from the others).

User-given labels (``Recorder(labels=...)``) win over detected ones with the same key.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("fabricscope.training")

# label -> environment variables, first integer wins
PARALLEL_ENV: dict[str, tuple[str, ...]] = {
    "tp": ("FABRICSCOPE_TP", "TENSOR_MODEL_PARALLEL_SIZE", "TENSOR_PARALLEL_SIZE", "TP_SIZE"),
    "pp": ("FABRICSCOPE_PP", "PIPELINE_MODEL_PARALLEL_SIZE", "PIPELINE_PARALLEL_SIZE", "PP_SIZE"),
    "dp": ("FABRICSCOPE_DP", "DATA_PARALLEL_SIZE", "DP_SIZE"),
    "cp": ("FABRICSCOPE_CP", "CONTEXT_PARALLEL_SIZE", "CP_SIZE"),
    "ep": ("FABRICSCOPE_EP", "EXPERT_MODEL_PARALLEL_SIZE", "EXPERT_PARALLEL_SIZE", "EP_SIZE"),
}
WORLD_ENV = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
# What torch introspection can raise on an odd build (no CUDA runtime, a stub module, a driver
# mismatch); anything else is a bug and reaches the recorder's own guard (counted, never raised).
_TORCH_ERRORS = (AttributeError, RuntimeError, ImportError, OSError, TypeError, ValueError)
MAX_VALUE_LEN = 64  # labels are for grouping, not for free text


def _env_int(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for n in names:
        v = str(env.get(n, "")).strip()
        if v.isdigit() and int(v) > 0:
            return str(int(v))
    return None


def nccl_version_string(ver: Any) -> str | None:
    """torch >= 2.1 gives ``(2, 21, 5)`` (maybe a suffix); older ones one int, 2708 or 21905."""
    if isinstance(ver, tuple) and len(ver) >= 3:
        return ".".join(str(x) for x in ver[:3]) + (f"-{ver[3]}" if len(ver) > 3 and ver[3] else "")
    if isinstance(ver, int) and ver > 0:
        # NCCL_VERSION_CODE: major*1000 + minor*100 + patch until 2.8, major*10000 + minor*100 + patch since 2.9
        major, rest = (ver // 10000, ver % 10000) if ver >= 20900 else (ver // 1000, ver % 1000)
        return f"{major}.{rest // 100}.{rest % 100}"
    return None


def _torch_labels(env: Mapping[str, str]) -> dict[str, str]:
    torch = sys.modules.get("torch")
    out: dict[str, str] = {}
    if torch is None:
        return out
    try:
        out["torch_version"] = str(torch.__version__)
    except _TORCH_ERRORS as e:
        log.debug("fabricscope: torch version unknown: %s", e)
    try:
        cuda = torch.version.cuda
        if cuda:
            out["cuda_version"] = str(cuda)
    except _TORCH_ERRORS as e:
        log.debug("fabricscope: CUDA version unknown: %s", e)
    try:
        if torch.cuda.is_available():
            import torch.cuda.nccl as nccl  # a submodule of torch, which the script already imported

            v = nccl_version_string(nccl.version())
            if v:
                out["nccl_version"] = v
    except _TORCH_ERRORS as e:
        log.debug("fabricscope: NCCL version unknown: %s", e)
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            out["world_size"] = str(int(dist.get_world_size()))
    except _TORCH_ERRORS as e:
        log.debug("fabricscope: world size unknown: %s", e)
    return out


def detect(env: Mapping[str, str]) -> dict[str, str]:
    """The labels this process can state about its job (see the module docstring)."""
    out = _torch_labels(env)
    world = _env_int(env, WORLD_ENV)
    if world is not None:
        out["world_size"] = world
    if "nccl_version" not in out and str(env.get("NCCL_VERSION", "")).strip():
        out["nccl_version"] = str(env["NCCL_VERSION"]).strip()
    for key, names in PARALLEL_ENV.items():
        v = _env_int(env, names)
        if v is not None:
            out[key] = v
    return {k: v[:MAX_VALUE_LEN] for k, v in out.items()}


def merged(detected: Mapping[str, str], given: Mapping[str, Any] | None) -> dict[str, Any]:
    """Detected labels under the user's: a key the user gave keeps the user's value."""
    return {**detected, **(given or {})}
