"""Training-side hook: per-step and per-collective timings from PyTorch jobs.

Importable with the standard library alone; torch is used only once the training script has
imported it. See :class:`Recorder` and the README section "Training jobs".
"""

from __future__ import annotations

from fabricscope.collectors.training.recorder import Recorder

_default: Recorder | None = None


def init(**kwargs: object) -> Recorder:
    """Create, start and remember the process's recorder (configured from the environment)."""
    global _default
    if _default is None:
        _default = Recorder(**kwargs).start()  # type: ignore[arg-type]
    return _default


def get() -> Recorder | None:
    return _default


__all__ = ["Recorder", "get", "init"]
