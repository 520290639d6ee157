"""Correlation engine: attribute slow training steps to a layer and a component (see engine.py).

One `AttributionEngine` per process (the API app owns it on `app.state.engine`); it is thread-safe.
"""

from fabricscope.service.correlate.constants import EngineConfig
from fabricscope.service.correlate.engine import AttributionEngine

__all__ = ["AttributionEngine", "EngineConfig"]
