"""fabricscope collectors: everything that gathers telemetry (switches, hosts, training jobs).

Imported as :mod:`fabricscope.collectors`. Nothing here serves HTTP or owns the schema, and
nothing here imports :mod:`fabricscope.service` (``make lint`` checks). The shared vocabulary
lives in :mod:`fabricscope.core`.
"""

if __name__ == "collectors":  # a 0.1 script run from a source checkout: same warning as installed
    import warnings

    from fabricscope._legacy import MESSAGE

    warnings.warn(MESSAGE, DeprecationWarning, stacklevel=2)
