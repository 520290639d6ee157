"""fabricscope: cross-layer telemetry correlation for distributed AI training clusters.

Everything importable lives under this name. The repository keeps the design card's folders and
links them in here (``fabricscope/collectors`` → ``collectors/``, ``service/``, ``migrations/``):

- :mod:`fabricscope.core`: the shared model every role may import (samples, events, errors,
  counter rates, the wire batch format, the metric catalogue). Standard library only, except
  the vectorized rates (numpy, imported by the agent and the server).
- :mod:`fabricscope.collectors`: what gathers telemetry (host agent, switch collectors, the
  training hook). Never imports the server.
- :mod:`fabricscope.service`: the API, database, correlation engine, alerts, simulator.
- :mod:`fabricscope.training`: the training hook, ``from fabricscope.training import Recorder``.
"""

__version__ = "0.2.0"
