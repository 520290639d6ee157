"""Which way congestion points. Backpressure travels upstream, from the egress queue that fills toward
the senders: on Ethernet as PFC pause (the switch whose queue fills sends pause out of the ports
traffic arrives on; their link peers *receive* it, and a paused port's own queue then fills too), on
InfiniBand as missing credits (a port waits to transmit, `port_xmit_wait`, because the port at the
other end cannot take more, up to the port whose own egress is the bottleneck).

So the loudest counters of a storm are often the victims': the spine ports receiving pause, the
uplinks sending it. `follow_backpressure` moves each such row of evidence onto the port at the end
of the chain, the culprit:
- a port whose queue builds (occupancy, watermark, ECN marks, queue drops, discards) while it does
  not receive pause is congested of its own accord;
- pause sent by a port, or received from it, counts for the congested port of the sender's switch;
  a switch with none is itself paused, so it counts for whatever pauses that switch, and so on
  downstream (to a NIC: the NIC that sent pause for lack of buffer is the culprit);
- a paused port's own queue growth is a symptom of whatever pauses it, and so is its PFC watchdog
  firing (the watchdog sees a queue stuck by pause it receives);
- `port_xmit_wait` on a port whose peer switch has a waiting port of its own is the same chain on
  InfiniBand: the culprit is the waiting port whose peer does not wait.
Rows without a chain (a port sending pause with no queue telemetry anywhere) keep their component.
"""

from __future__ import annotations

import pandas as pd

from fabricscope.service.correlate.localize import SWITCH_ROLES, Topo

RX_PAUSE = "rx_pause_frames_total"
TX_PAUSE = "tx_pause_frames_total"
XMIT_WAIT = "port_xmit_wait_total"
# A switch port's own congestion: its egress queue fills, marks or drops.
QUEUE_BUILDUP = frozenset(
    {
        "queue_occupancy_bytes",
        "queue_watermark_bytes",
        "queue_dropped_packets_total",
        "ecn_marked_packets_total",
        "tx_discards_total",
    }
)
# A port is paused when it receives pause, or when its PFC watchdog found a queue stuck by a pause storm.
PAUSED_BY = frozenset({RX_PAUSE, "pfc_deadlock_total"})


def _device(port: str) -> str:
    return port.split(":", 1)[0]


def _strongest_per_device(rows: pd.DataFrame) -> dict[str, str]:
    """device -> its port with the most evidence among `rows`."""
    if rows.empty:
        return {}
    by_port = rows.groupby("source")["contrib"].sum().sort_values(ascending=False, kind="stable")
    out: dict[str, str] = {}
    for port in by_port.index:
        out.setdefault(_device(str(port)), str(port))
    return out


class _Chains:
    def __init__(self, ev: pd.DataFrame, topo: Topo) -> None:
        self.topo = topo
        switch = ev["role"].isin(SWITCH_ROLES)
        paused_rows = ev[switch & ev["metric"].isin(PAUSED_BY)]
        self.paused = set(paused_rows["source"])
        build = ev[switch & ev["metric"].isin(QUEUE_BUILDUP) & ~ev["source"].isin(self.paused)]
        self.congested = set(build["source"])
        self.root_of = _strongest_per_device(build)
        self.pauser_of = _strongest_per_device(paused_rows)
        wait_rows = ev[switch & (ev["metric"] == XMIT_WAIT)]
        self.waiting = set(wait_rows["source"])
        self.waiter_of = _strongest_per_device(wait_rows)

    def _downstream(self, port: str, seen: set[str]) -> tuple[str, str]:
        """(component, layer) that pauses `port` through its link."""
        peer = self.topo.peer.get(port)
        if peer is None:
            return port, "fabric"
        if self.topo.role.get(peer) == "nic":
            return peer, "nic"
        return self.pause_culprit(peer, seen)

    def pause_culprit(self, port: str, seen: set[str] | None = None) -> tuple[str, str]:
        """The congested port that `port`'s pause (sent or queued behind) comes from."""
        seen = set() if seen is None else seen
        if port in seen or port in self.congested:
            return port, "fabric"
        seen.add(port)
        if port in self.paused:
            return self._downstream(port, seen)
        root = self.root_of.get(_device(port))
        if root is not None:
            return root, "fabric"
        pauser = self.pauser_of.get(_device(port))
        if pauser is not None:
            return self._downstream(pauser, seen)
        return port, "fabric"

    def wait_culprit(self, into: str, fallback: str, seen: set[str] | None = None) -> str:
        """The waiting port at the downstream end of a credit chain: whoever waits to send into the
        switch port `into` waits on that switch's own waiting port, if it has another one."""
        seen = set() if seen is None else seen
        if self.topo.role.get(into) not in SWITCH_ROLES:
            return fallback
        nxt = self.waiter_of.get(_device(into))
        if nxt is None or nxt == into or nxt in seen:
            return fallback
        seen.add(nxt)
        return self.wait_culprit(self.topo.peer.get(nxt, nxt), nxt, seen)


def follow_backpressure(ev: pd.DataFrame, topo: Topo) -> pd.DataFrame:
    """`ev`: candidates() rows (source, role, metric, layer, component, contrib, ...). Returns them with
    the components (and layers) of pause, paused-queue and credit-wait evidence moved to the culprit."""
    if ev.empty or not {"source", "role", "metric", "layer", "component", "contrib"} <= set(ev.columns):
        return ev
    ch = _Chains(ev, topo)
    if not (ch.paused or ch.waiting or ev["metric"].eq(TX_PAUSE).any()):
        return ev
    ev = ev.copy()
    comps, layers = list(ev["component"]), list(ev["layer"])
    for i, (src, metric, layer, comp) in enumerate(
        zip(ev["source"], ev["metric"], ev["layer"], ev["component"], strict=False)
    ):
        if layer != "fabric" or topo.role.get(comp) not in SWITCH_ROLES:
            continue  # links, NICs and volumes are named by their own signals
        if metric == XMIT_WAIT:
            comps[i] = ch.wait_culprit(topo.peer.get(src, src), comp)
        elif metric == TX_PAUSE or metric in PAUSED_BY or (metric in QUEUE_BUILDUP and src in ch.paused):
            comps[i], layers[i] = ch.pause_culprit(comp)
    ev["moved"] = [c != o for c, o in zip(comps, ev["component"], strict=True)]
    ev["component"], ev["layer"] = comps, layers
    return ev
