"""fabricscope collectors: everything that gathers telemetry (switches, hosts, training jobs).

Nothing here serves HTTP or owns the schema. The shared vocabulary lives in :mod:`collectors.core`.
"""
