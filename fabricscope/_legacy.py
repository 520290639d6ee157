"""Keeps ``import collectors.training`` (fabricscope 0.1) working for one release, with a warning.

0.1 installed generic top-level packages (``collectors``, ``service``). 0.2 installs only
``fabricscope*``; training scripts written against 0.1 still say ``from collectors.training import
Recorder``. ``fabricscope-legacy.pth`` installs :class:`LegacyFinder` at interpreter start. It
answers ``collectors`` only when no real ``collectors`` package is on ``sys.path`` (another
project's wins), and then only ``collectors.training*`` below it, aliasing each to the module under
``fabricscope`` (the same module object, not a copy). It sits first on ``sys.meta_path`` because
the path finder would otherwise load the aliased package's files a second time under the old name.
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
_KEPT = "collectors.training"
MESSAGE = ("'collectors.training' is deprecated and goes away in fabricscope 0.3: "
           "write 'from fabricscope.training import Recorder'")


class _OldPackageLoader(importlib.abc.Loader):
    """``collectors`` itself: an empty package, so nothing but ``collectors.training`` resolves below it."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = ModuleType(_OLD, "fabricscope 0.1's package name, kept for collectors.training only")
        module.__path__ = []
        module.__fabricscope_legacy__ = True  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run."""


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
        if fullname == _OLD:
            if importlib.machinery.PathFinder.find_spec(fullname) is not None:
                return None  # a real top-level ``collectors`` (another project's) is not ours to shadow
            return importlib.machinery.ModuleSpec(fullname, _OldPackageLoader(), is_package=True)
        if not (fullname == _KEPT or fullname.startswith(_KEPT + ".")) \
                or not getattr(sys.modules.get(_OLD), "__fabricscope_legacy__", False):
            return None
        if fullname == _KEPT:
            # warnings skips importlib's frames itself: 2 is the line of the script that imports
            warnings.warn(MESSAGE, DeprecationWarning, stacklevel=2)
        new = f"fabricscope.{fullname}"
        is_pkg = hasattr(importlib.import_module(new), "__path__")
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new), is_package=is_pkg)


def install() -> None:
    if not any(isinstance(f, LegacyFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, LegacyFinder())
