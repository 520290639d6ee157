"""Deterministic sharding: ``--shard i/N`` keeps the devices whose stable hash lands in shard i.

The hash is SHA-256 of the device name (not Python's ``hash``, which is salted per process), so
every collector process agrees without coordination; N processes cover the inventory exactly once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TypeVar

from fabricscope.core.errors import ConfigError

T = TypeVar("T")


def parse_shard(spec: str) -> tuple[int, int]:
    """``"2/4"`` → ``(2, 4)``; shards are numbered from 1."""
    try:
        i_s, n_s = spec.split("/")
        i, n = int(i_s), int(n_s)
    except ValueError:
        raise ConfigError(f"shard: {spec!r} is not of the form i/N (e.g. 2/4)") from None
    if n < 1 or not 1 <= i <= n:
        raise ConfigError(f"shard: {spec!r} needs 1 <= i <= N")
    return i, n


def shard_of(name: str, n: int) -> int:
    digest = hashlib.sha256(name.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def select(items: Iterable[T], i: int, n: int, key: str = "name") -> list[T]:
    return [it for it in items if shard_of(getattr(it, key), n) == i]
