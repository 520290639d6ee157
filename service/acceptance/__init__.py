"""Fabric acceptance baselines (nccl-tests/rccl-tests runs, `store`) and what jobs achieve against
them (`efficiency`: nccl-tests bus bandwidth of the hook's collectives, fabricscope.core.busbw)."""
