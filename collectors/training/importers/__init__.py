"""Importers for what teams already record: NCCL Inspector logs, PyTorch profiler (Kineto) traces
and nccl-tests/rccl-tests acceptance runs. Parsing is pure (text or JSON in, docs/API.md dicts
out); ``cli`` posts."""
