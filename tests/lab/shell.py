"""Running the lab's kernel tools (``ip``, ``tc``, ``nft``, ``losetup``...), optionally inside a namespace."""

from __future__ import annotations

import logging
import subprocess

from fabricscope.core.errors import FabricscopeError

log = logging.getLogger("fabricscope.lab")


class LabError(FabricscopeError):
    pass


def sh(*args: str, check: bool = True, ns: str | None = None, quiet: bool = False) -> str:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[:300]}")
    if r.returncode and not quiet:
        log.debug("%s: %s", " ".join(cmd), r.stderr.strip())
    return r.stdout
