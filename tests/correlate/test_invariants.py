"""The answer invariants (service/correlate/invariants.py): a component's kind fixes its layer, a slow
step names a layer, a healthy step names none."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from fabricscope.service.correlate.invariants import violations, with_kind_layer
from fabricscope.service.correlate.localize import build_topo
from fabricscope.service.correlate.records import CauseDraft
from fabricscope.service.correlate.rules import ids

RANKS = pd.DataFrame({"host": ["n1", "n2"], "gpu": ["gpu0", "gpu0"], "nic": ["mlx5_0", "mlx5_0"]})
LINKS = pd.DataFrame({"a": ["n1:mlx5_0", "n2:mlx5_0", "leaf1:up1"], "b": ["leaf1:p1", "leaf1:p2", "spine1:p1"]})
TOPO = build_topo(RANKS, LINKS, ["n1:/ckpt"])


def _draft(layer: str, component: str | None) -> CauseDraft:
    return {"layer": layer, "component": component, "confidence": 0.8, "evidence": [], "rule": ids.CAUSE_NETWORK_SIGNAL}


@pytest.mark.parametrize(("layer", "component", "want"), [
    ("fabric", "n1:mlx5_0", "nic"),  # a host NIC that sent pause is the NIC layer, whatever signal named it
    ("link", "n1:mlx5_0", "nic"),
    ("nic", "leaf1:p1", "fabric"),  # a switch port is fabric (or link)
    ("compute", "n1:/ckpt", "storage"),
    ("host", "n1:gpu0", "compute"),
])
def test_a_components_kind_fixes_its_layer(layer: str, component: str, want: str) -> None:
    got = with_kind_layer(_draft(layer, component), TOPO)
    assert got["layer"] == want and got["component"] == component
    assert got["adjust"] == [ids.ADJUST_LAYER_FROM_KIND] and got["rule"] == ids.CAUSE_NETWORK_SIGNAL


@pytest.mark.parametrize(("layer", "component"), [
    ("link", "leaf1:p1"), ("fabric", "spine1:p1"), ("nic", "n1:mlx5_0"), ("compute", "n1"), ("host", "n1"),
    ("nic", "n1"), ("fabric", "elsewhere:p9"),  # a component the topology does not know keeps its layer
    ("unknown", None),
])
def test_a_layer_the_kind_allows_is_kept(layer: str, component: str | None) -> None:
    d = _draft(layer, component)
    assert with_kind_layer(d, TOPO) is d and "adjust" not in d


def _answer(**kw: Any) -> dict[str, Any]:
    return {"step": 9, "slow": True, "layer": "nic", "component": "n1:mlx5_0", "causes": [], **kw}


@pytest.mark.parametrize(("answer", "broken"), [
    (_answer(), []),
    (_answer(layer="fabric"), ["layer_from_kind"]),
    (_answer(layer="none", component=None), ["slow_names_layer"]),
    (_answer(slow=False), ["healthy_names_none"]),
    (_answer(slow=False, layer="none", component=None), []),
    (_answer(slow=False, layer="none", component=None, causes=[{"layer": "nic", "component": "n1:mlx5_0"}]),
     ["healthy_names_none"]),
    (_answer(layer="network", component="n9:x"), ["known_layer"]),
    (_answer(causes=[{"layer": "nic", "component": "n1:mlx5_0"}, {"layer": "compute", "component": "n1:/ckpt"}]),
     ["layer_from_kind"]),
])
def test_violations_name_each_broken_invariant(answer: dict[str, Any], broken: list[str]) -> None:
    assert [inv for inv, _ in violations(answer, TOPO.role)] == broken
