"""``ethtool -S`` text -> {key: value} and the driver it came from (pure; no mapping to metrics).

``ethtool -S`` prints ``key: count`` lines under an optional ``NIC statistics:`` header (a
``| grep`` paste has none) and never names its driver: :func:`sniff_driver` picks the table by keys
only one driver prints (``ethtool_maps.DriverMap.distinctive``), and says it guessed. Everything
this module cannot read is returned as a problem line, never dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable

from fabricscope.collectors.host.ethtool_maps import DRIVERS, stat_key
from fabricscope.core.errors import ParseError
from fabricscope.core.values import BadValue, counter


def read_ethtool_text(text: str) -> tuple[dict[str, float], list[str]]:
    """``ethtool -S`` output -> ({key: value}, problems). The ``NIC statistics:`` header is optional
    (``ethtool -S dev | grep ...`` pastes have none). A key printed again (vmxnet3's per-queue blocks
    repeat their names) is kept as ``key#1``, ``key#2``...; every line that is not ``key: count`` is
    named in the problems, never dropped silently."""
    out: dict[str, float] = {}
    bad: list[str] = []
    repeated = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.endswith("statistics:") or line.startswith("#"):
            continue  # header, blank, or a shell prompt/comment line of a paste
        key, sep, value = line.rpartition(":")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            bad.append(f"line not 'key: count', skipped: {line[:80]!r}")
            continue
        try:  # counters are unsigned 64-bit: "-1", "N/A" and a count past 2**64 - 1 are not values
            number = counter(value)
        except BadValue as exc:
            bad.append(f"line not 'key: count', skipped: {key}: {exc}")
            continue
        numbered = stat_key(key, out)
        repeated += numbered != key
        out[numbered] = number
    problems = bad[:20]
    if len(bad) > 20:
        problems.append(f"... and {len(bad) - 20} more lines not 'key: count' or bad values, skipped")
    if repeated:
        problems.append(f"{repeated} keys printed more than once (per-queue blocks): kept as key#1, key#2, ...")
    return out, problems


def parse_ethtool_stats(text: str) -> dict[str, float]:
    """``ethtool -S`` output -> {key: value}; ParseError when no counter is in it."""
    out, _problems = read_ethtool_text(text)
    if not out:
        raise ParseError("not ethtool -S output (no 'key: count' lines)")
    return out


def sniff_driver(keys: Iterable[str]) -> tuple[str | None, list[str]]:
    """The driver whose table fits ``keys``, judged by keys only that driver prints; the guess said.

    One driver with distinctive keys: that driver (still a guess: confirm with ``--driver``). Several or
    none: the first by distinctive-key count, or none (every key an extra), and the candidates named."""
    keys = list(keys)
    hits: dict[str, int] = {}
    for name, dmap in DRIVERS.items():
        n = sum(1 for k in keys if any(p.fullmatch(k) for p in dmap.distinctive))
        if n:
            hits[name] = n
    if len(hits) == 1:
        (driver, n), = hits.items()
        return driver, [f"driver sniffed as {driver} from {n} keys only it prints; confirm with --driver {driver}"]
    if not hits:  # no distinctive key: the tables that map any key are the (weaker) candidates
        hits = {name: n for name, dmap in DRIVERS.items()
                if (n := sum(1 for k in keys if any(r.pattern.fullmatch(k) for r in dmap.rules)))}
        if len(hits) == 1:
            (driver, n), = hits.items()
            return driver, [f"driver read as {driver}: no key only one driver prints, but only its table maps "
                            f"any ({n}) of these keys; confirm with --driver {driver}"]
    if not hits:
        return None, ["driver not recognised from the keys (no key only one driver prints): every key kept "
                      "as an extra; name it with --driver (" + ", ".join(sorted(DRIVERS)) + ")"]
    ranked = sorted(hits.items(), key=lambda kv: (-kv[1], kv[0]))
    driver = ranked[0][0]
    return driver, [f"driver ambiguous: keys of {', '.join(f'{d} ({n})' for d, n in ranked)}; read as {driver}; "
                    f"confirm with --driver"]
