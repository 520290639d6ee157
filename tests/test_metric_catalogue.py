"""The canonical metric catalogue (fabricscope.core.metrics) is docs/API.md's table, and what the
engine and the collectors' mapping tables name is in it."""

from __future__ import annotations

import re
from pathlib import Path

from fabricscope.core.metrics import CATALOGUE, KNOWN_EXTRAS, is_canonical

API_MD = Path(__file__).resolve().parent.parent / "docs/API.md"


def _api_md_table() -> dict[str, str]:
    rows: dict[str, str] = {}
    text = API_MD.read_text()
    table = text[text.index("| metric | kind | meaning |"):].split("\n\n", 1)[0]
    for line in table.splitlines()[2:]:
        names, kind, _ = (c.strip() for c in line.strip("|").split("|"))
        for name in re.findall(r"`([a-z_]+)`", names):
            rows[name] = kind
    return rows


def test_catalogue_is_the_api_md_table() -> None:
    documented = _api_md_table()
    assert len(documented) >= 30
    assert {n: m.kind for n, m in CATALOGUE.items()} == documented


def test_counters_and_only_counters_end_in_total() -> None:
    for name, metric in CATALOGUE.items():
        assert (metric.kind == "counter") == name.endswith("_total"), name


def test_switch_mapping_tables_target_canonical_names() -> None:
    """SNMP OIDs, NETCONF leaves and gNMI paths map onto catalogue names (vendor extras aside)."""
    from fabricscope.collectors.switch.gnmi import paths
    from fabricscope.collectors.switch.netconf import models
    from fabricscope.collectors.switch.snmp import oids

    targets: set[str] = set()
    for module in (oids, models, paths):
        for value in vars(module).values():
            if isinstance(value, dict):
                for v in value.values():
                    candidates = v if isinstance(v, tuple) else (v,)
                    targets |= {c for c in candidates if isinstance(c, str) and re.fullmatch(r"[a-z_]+_(total|bps)", c)}
    assert len(targets) >= 10
    assert {t for t in targets if not is_canonical(t)} == set(KNOWN_EXTRAS)
