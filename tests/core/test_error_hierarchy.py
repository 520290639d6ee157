"""Every exception class the project defines derives from FabricscopeError, so callers can catch
"anything fabricscope raised on purpose" with one type and everything else stays a bug."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import fabricscope
from fabricscope.core.errors import FabricscopeError

SKIPPED = ("fabricscope.migrations.env",)  # alembic env.py runs migrations when imported; __main__ runs the CLI


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(fabricscope.__path__, "fabricscope."):
        skipped = info.name in SKIPPED or info.name.endswith(".__main__") or ".migrations.versions" in info.name
        if ".lab" in info.name or skipped:
            continue
        names.append(info.name)
    return names


def test_every_project_exception_derives_from_fabricscope_error() -> None:
    strays = []
    seen = 0
    for name in _modules():
        module = importlib.import_module(name)
        for cls_name, cls in inspect.getmembers(module, inspect.isclass):
            # A BaseException that is no Exception is control flow (like KeyboardInterrupt: SIGTERM's
            # Terminated), not an error, and must stay out of every `except Exception`.
            if cls.__module__ != name or not issubclass(cls, Exception):
                continue
            seen += 1
            if not issubclass(cls, FabricscopeError):
                strays.append(f"{name}.{cls_name}")
    assert seen >= 10, f"only {seen} exception classes found: the module walk is broken"
    assert strays == []
