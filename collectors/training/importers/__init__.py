"""Importers for training timings that teams already record: NCCL Inspector logs and PyTorch
profiler (Kineto) traces. Parsing is pure (text or JSON in, docs/API.md dicts out); ``cli`` posts."""
