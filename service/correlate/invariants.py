"""What every answer must satisfy, whatever rule produced it:

- the layer follows from the component's kind (KIND_LAYERS): a host NIC is `nic`, a switch port
  `fabric` or `link`, a GPU `compute`, a volume `storage`;
- a step answered slow names a layer (a cause, or `unknown`);
- a healthy step names none (`layer: none`, no component, no causes).

The engine applies the first as a rule (`adjust.layer_from_kind`, `with_kind_layer`) to every cause
it builds; the API checks all three on every answer it returns (`violations`), logs any breach as an
engine bug and counts it (fabricscope_engine_invariant_violations_total), without failing the request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabricscope.service.correlate.localize import Topo
from fabricscope.service.correlate.records import CauseDraft
from fabricscope.service.correlate.rules import ids
from fabricscope.service.correlate.rules.trace import noted

# Topology role -> the layers a component of that kind may be answered with; the first is its own.
# A host stands for what the placement does not name below it: its rank's unplaced GPU (`compute`),
# the NIC its ranks use when that is not one known NIC (`nic`), or its own CPU and loaders (`host`).
KIND_LAYERS: dict[str, tuple[str, ...]] = {
    "nic": ("nic",),
    "leaf_down": ("fabric", "link"),
    "leaf_up": ("fabric", "link"),
    "spine": ("fabric", "link"),
    "gpu": ("compute",),
    "volume": ("storage",),
    "host": ("host", "compute", "nic"),
}
LAYERS = ("none", "unknown", "compute", "host", "nic", "link", "fabric", "storage")


def with_kind_layer(cause: CauseDraft, topo: Topo) -> CauseDraft:
    """`cause` with the layer its component's kind fixes, when its own layer is not one the kind
    allows (noted as `adjust.layer_from_kind`); unchanged for a component the topology does not know."""
    allowed = KIND_LAYERS.get(topo.role.get(cause["component"] or "", ""))
    if not allowed or cause["layer"] in allowed or cause["layer"] == "unknown":
        return cause
    return noted({**cause, "layer": allowed[0], "adjust": list(cause.get("adjust", []))}, ids.ADJUST_LAYER_FROM_KIND)


INVARIANTS = ("known_layer", "slow_names_layer", "healthy_names_none", "layer_from_kind")


def violations(answer: Mapping[str, Any], role_of: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """The invariants (INVARIANTS) `answer`, an attribution, breaks: (invariant, one line saying how);
    `role_of`: component -> topology role, when the caller knows them (else no kind check)."""
    out: list[tuple[str, str]] = []
    layer, comp = answer.get("layer"), answer.get("component")
    if layer not in LAYERS:
        out.append(("known_layer", f"layer {layer!r} is not one of {', '.join(LAYERS)}"))
    if answer.get("slow") and layer == "none":
        out.append(("slow_names_layer", "a slow step names no layer"))
    if not answer.get("slow") and (layer != "none" or comp is not None or answer.get("causes")):
        out.append(("healthy_names_none", f"a healthy step names layer {layer!r}, component {comp!r}"))
    roles = role_of or {}
    for c in [answer, *(answer.get("causes") or [])]:
        kind = roles.get(c.get("component") or "", "")
        allowed = KIND_LAYERS.get(kind)
        if allowed and c.get("layer") not in (*allowed, "unknown"):
            out.append(
                (
                    "layer_from_kind",
                    f"component {c.get('component')!r} of kind {kind!r} answered with layer "
                    f"{c.get('layer')!r} (allowed: {', '.join(allowed)})",
                )
            )
    return sorted(set(out))
