"""Everything is in pyproject.toml; this adds one file to the wheel's root: fabricscope-legacy.pth.

That file keeps ``import collectors.training`` of fabricscope 0.1 working for one release
(:mod:`fabricscope._legacy`) without installing a top-level ``collectors`` package.
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "fabricscope-legacy.pth"


class BuildPyWithLegacyPth(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            self.copy_file(str(Path(__file__).parent / PTH), str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithLegacyPth})
