"""The training-side hook: ``from fabricscope.training import Recorder``.

Standard library only; torch is used once the training script has imported it. The code lives in
:mod:`fabricscope.collectors.training`.
"""

from fabricscope.collectors.training import Recorder, get, init

__all__ = ["Recorder", "get", "init"]
