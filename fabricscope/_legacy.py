"""Keeps ``import collectors.training`` (fabricscope 0.1) working for one release, with a warning.

0.1 installed generic top-level packages (``collectors``, ``service``). 0.2 installs only
``fabricscope*``; training scripts written against 0.1 still say ``from collectors.training import
Recorder``. ``fabricscope-legacy.pth`` installs :class:`LegacyFinder` at interpreter start, last
on ``sys.meta_path``: it answers only when no real ``collectors`` package exists, and then only for
``collectors`` and ``collectors.training*``, aliasing them to the modules under ``fabricscope``.
Removed in 0.3.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

_OLD = "collectors"
_ALIASED = ("collectors", "collectors.training")
MESSAGE = ("'collectors.training' is deprecated and goes away in fabricscope 0.3: "
           "write 'from fabricscope.training import Recorder'")


def _outside_import_machinery() -> int:
    """The stacklevel of the first frame that is not importlib's, so the warning names the script."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith("<frozen importlib")
                                 or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """The target module is already executed."""


class LegacyFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None
                  ) -> importlib.machinery.ModuleSpec | None:
        if not any(fullname == name or fullname.startswith(name + ".") for name in _ALIASED[1:]) \
                and fullname != _OLD:
            return None
        if fullname == "collectors.training":
            warnings.warn(MESSAGE, DeprecationWarning, stacklevel=_outside_import_machinery())
        new = f"fabricscope.{fullname}"
        is_pkg = hasattr(importlib.import_module(new), "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new), is_package=is_pkg)


def install() -> None:
    if not any(isinstance(f, LegacyFinder) for f in sys.meta_path):
        sys.meta_path.append(LegacyFinder())
