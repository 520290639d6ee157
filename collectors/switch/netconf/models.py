"""YANG models the NETCONF collector understands: capability to look for, subtree filter, and the
leaf-path → canonical metric table. Paths are relative to one interface list entry and use
``{ns}`` for the model namespace. The first model in :data:`MODELS` the server advertises wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Transform = Literal["up", "speed_bps", "oc_speed", "epoch", "junos_speed"] | None


@dataclass(frozen=True, slots=True)
class Leaf:
    path: str
    metric: str
    rank: int = 0
    required: bool = True  # a summed metric is only emitted when every required part is present
    transform: Transform = None


@dataclass(frozen=True, slots=True)
class SubList:
    """A list inside each interface entry (egress queues, PFC priorities): every entry gives its
    leaves' samples with the entry's key as the label ``label``."""

    entries: str
    key_path: str
    label: str
    leaves: tuple[Leaf, ...]


@dataclass(frozen=True, slots=True)
class Model:
    name: str
    namespace: str
    capability: str  # substring of a server capability URI
    filter: str  # subtree filter for <get>
    entries: str  # path from <data> to each interface list entry
    name_path: str
    leaves: tuple[Leaf, ...]
    epoch_path: str | None = None  # last-clear / discontinuity-time: a change means a reset
    lists: tuple[SubList, ...] = ()
    # vendor RPCs sent instead of <get>; their replies carry the entries without <data>
    rpcs: tuple[str, ...] = ()


OC_IF = "http://openconfig.net/yang/interfaces"
OC_ETH = "http://openconfig.net/yang/interfaces/ethernet"
IETF_IF = "urn:ietf:params:xml:ns:yang:ietf-interfaces"
XR_IF = "http://cisco.com/ns/yang/Cisco-IOS-XR-pfi-im-cmd-oper"

_OC_C = "{ns}state/{ns}counters/{ns}"
_OC_E = "{eth}ethernet/{eth}state/{eth}counters/{eth}"

OPENCONFIG = Model(
    name="openconfig-interfaces",
    namespace=OC_IF,
    capability="openconfig-interfaces",
    filter=(
        f'<interfaces xmlns="{OC_IF}"><interface><name/><state/>'
        f'<ethernet xmlns="{OC_ETH}"><state/></ethernet></interface></interfaces>'
    ),
    entries="{ns}interfaces/{ns}interface",
    name_path="{ns}name",
    leaves=(
        Leaf(_OC_C + "in-octets", "rx_bytes_total"),
        Leaf(_OC_C + "out-octets", "tx_bytes_total"),
        Leaf(_OC_C + "in-pkts", "rx_packets_total"),
        Leaf(_OC_C + "out-pkts", "tx_packets_total"),
        Leaf(_OC_C + "in-discards", "rx_discards_total"),
        Leaf(_OC_C + "out-discards", "tx_discards_total"),
        Leaf(_OC_C + "in-errors", "rx_errors_total"),
        Leaf(_OC_C + "out-errors", "tx_errors_total"),
        Leaf(_OC_C + "in-fcs-errors", "rx_fcs_errors_total"),
        Leaf(_OC_E + "in-crc-errors", "rx_fcs_errors_total", rank=1),
        Leaf(_OC_E + "in-mac-pause-frames", "rx_pause_frames_total"),
        Leaf(_OC_E + "out-mac-pause-frames", "tx_pause_frames_total"),
        # up+down transitions, not downs: kept as its own metric rather than faking link_down_total
        Leaf(_OC_C + "carrier-transitions", "carrier_transitions_total"),
        Leaf("{ns}state/{ns}oper-status", "oper_up", transform="up"),
        Leaf("{eth}ethernet/{eth}state/{eth}port-speed", "speed_bps", transform="oc_speed"),
    ),
    epoch_path=_OC_C + "last-clear",
)

_IETF_S = "{ns}statistics/{ns}"
_IETF_LEAVES = (
    Leaf(_IETF_S + "in-octets", "rx_bytes_total"),
    Leaf(_IETF_S + "out-octets", "tx_bytes_total"),
    Leaf(_IETF_S + "in-unicast-pkts", "rx_packets_total"),
    Leaf(_IETF_S + "in-broadcast-pkts", "rx_packets_total", required=False),
    Leaf(_IETF_S + "in-multicast-pkts", "rx_packets_total", required=False),
    Leaf(_IETF_S + "out-unicast-pkts", "tx_packets_total"),
    Leaf(_IETF_S + "out-broadcast-pkts", "tx_packets_total", required=False),
    Leaf(_IETF_S + "out-multicast-pkts", "tx_packets_total", required=False),
    Leaf(_IETF_S + "in-discards", "rx_discards_total"),
    Leaf(_IETF_S + "out-discards", "tx_discards_total"),
    Leaf(_IETF_S + "in-errors", "rx_errors_total"),
    Leaf(_IETF_S + "out-errors", "tx_errors_total"),
    Leaf("{ns}oper-status", "oper_up", transform="up"),
    Leaf("{ns}speed", "speed_bps", transform="speed_bps"),
)

# RFC 7223 (2014) keeps operational state in /interfaces-state; RFC 8343 (NMDA) moved it into
# /interfaces. Servers implementing the 2014 revision (yuma123 netconfd, many switches) need the former.
IETF_STATE = Model(
    name="ietf-interfaces (interfaces-state)",
    namespace=IETF_IF,
    capability="ietf-interfaces",
    filter=f'<interfaces-state xmlns="{IETF_IF}"/>',
    entries="{ns}interfaces-state/{ns}interface",
    name_path="{ns}name",
    leaves=_IETF_LEAVES,
    epoch_path=_IETF_S + "discontinuity-time",
)

_XR = "{ns}interface-statistics/{ns}full-interface-stats/{ns}"
IOSXR = Model(
    name="Cisco-IOS-XR-pfi-im-cmd-oper",
    namespace=XR_IF,
    capability="Cisco-IOS-XR-pfi-im-cmd-oper",
    filter=f'<interfaces xmlns="{XR_IF}"><interface-xr><interface/></interface-xr></interfaces>',
    entries="{ns}interfaces/{ns}interface-xr/{ns}interface",
    name_path="{ns}interface-name",
    leaves=(
        Leaf(_XR + "bytes-received", "rx_bytes_total"),
        Leaf(_XR + "bytes-sent", "tx_bytes_total"),
        Leaf(_XR + "packets-received", "rx_packets_total"),
        Leaf(_XR + "packets-sent", "tx_packets_total"),
        Leaf(_XR + "input-drops", "rx_discards_total"),
        Leaf(_XR + "output-drops", "tx_discards_total"),
        Leaf(_XR + "input-errors", "rx_errors_total"),
        Leaf(_XR + "output-errors", "tx_errors_total"),
        Leaf(_XR + "crc-errors", "rx_fcs_errors_total"),
    ),
)

# Junos native: `show interfaces extensive` and `show interfaces queue` as RPCs. The reply namespace
# carries the release (junos/22.4R0/junos-interface), so paths match any namespace ("{*}").
JUNOS_CAPABILITY = "xml.juniper.net/netconf/junos"
_JQ = (
    Leaf("{ns}queue-counters-trans-packets", "tx_queue_packets_total"),
    Leaf("{ns}queue-counters-trans-bytes", "tx_queue_bytes_total"),  # queue RPC only; extensive is brief
    Leaf("{ns}queue-counters-total-drop-packets", "queue_dropped_packets_total"),
)
JUNOS = Model(
    name="junos-interface-information",
    namespace="*",
    capability=JUNOS_CAPABILITY,
    filter="",
    entries="{ns}interface-information/{ns}physical-interface",
    name_path="{ns}name",
    leaves=(
        Leaf("{ns}traffic-statistics/{ns}input-bytes", "rx_bytes_total"),
        Leaf("{ns}traffic-statistics/{ns}output-bytes", "tx_bytes_total"),
        Leaf("{ns}traffic-statistics/{ns}input-packets", "rx_packets_total"),
        Leaf("{ns}traffic-statistics/{ns}output-packets", "tx_packets_total"),
        Leaf("{ns}input-error-list/{ns}input-errors", "rx_errors_total"),
        Leaf("{ns}input-error-list/{ns}input-drops", "rx_discards_total"),
        Leaf("{ns}output-error-list/{ns}output-errors", "tx_errors_total"),
        Leaf("{ns}output-error-list/{ns}output-drops", "tx_discards_total"),
        Leaf("{ns}output-error-list/{ns}carrier-transitions", "carrier_transitions_total"),
        Leaf("{ns}ethernet-mac-statistics/{ns}input-crc-errors", "rx_fcs_errors_total"),
        Leaf("{ns}ethernet-mac-statistics/{ns}input-mac-pause-frames", "rx_pause_frames_total"),
        Leaf("{ns}ethernet-mac-statistics/{ns}output-mac-pause-frames", "tx_pause_frames_total"),
        Leaf("{ns}oper-status", "oper_up", transform="up"),
        Leaf("{ns}speed", "speed_bps", transform="junos_speed"),
    ),
    lists=(
        SubList("{ns}queue-counters/{ns}queue", "{ns}queue-number", "queue", _JQ),
        SubList("{ns}ethernet-mac-pfc-statistics", "{ns}mac-pfc-dot1p", "priority", (
            Leaf("{ns}input-mac-pfc-frames", "rx_pause_frames_total"),
            Leaf("{ns}output-mac-pfc-frames", "tx_pause_frames_total"),
        )),
    ),
    rpcs=(
        "<get-interface-information><extensive/></get-interface-information>",
        "<get-interface-queue-information/>",
    ),
)

# openconfig-qos egress queues, fetched beside the interfaces model when the server advertises it.
OC_QOS_NS = "http://openconfig.net/yang/qos"
_OQ = "{ns}state/{ns}"
OPENCONFIG_QOS = Model(
    name="openconfig-qos",
    namespace=OC_QOS_NS,
    capability="openconfig-qos",
    filter=f'<qos xmlns="{OC_QOS_NS}"><interfaces><interface><interface-id/><output><queues/></output>'
           "</interface></interfaces></qos>",
    entries="{ns}qos/{ns}interfaces/{ns}interface",
    name_path="{ns}interface-id",
    leaves=(),
    lists=(SubList("{ns}output/{ns}queues/{ns}queue", "{ns}name", "queue", (
        Leaf(_OQ + "transmit-pkts", "tx_queue_packets_total"),
        Leaf(_OQ + "transmit-octets", "tx_queue_bytes_total"),
        Leaf(_OQ + "dropped-pkts", "queue_dropped_packets_total"),
        Leaf(_OQ + "ecn-marked-pkts", "ecn_marked_packets_total"),  # vendor augment (SONiC mgmt)
        Leaf(_OQ + "max-queue-len", "queue_watermark_bytes"),
    )),),
)

# Preference order: the vendor-neutral model with the most detail first.
MODELS: tuple[Model, ...] = (OPENCONFIG, IOSXR, JUNOS, IETF_STATE)
# Fetched in addition to the chosen interfaces model, each when its capability is advertised.
EXTRA_MODELS: tuple[Model, ...] = (OPENCONFIG_QOS,)

# openconfig-if-ethernet ETHERNET_SPEED identities → bits per second
OC_SPEEDS: dict[str, float] = {
    "SPEED_10MB": 10e6,
    "SPEED_100MB": 100e6,
    "SPEED_1GB": 1e9,
    "SPEED_2500MB": 2.5e9,
    "SPEED_5GB": 5e9,
    "SPEED_10GB": 10e9,
    "SPEED_25GB": 25e9,
    "SPEED_40GB": 40e9,
    "SPEED_50GB": 50e9,
    "SPEED_100GB": 100e9,
    "SPEED_200GB": 200e9,
    "SPEED_400GB": 400e9,
    "SPEED_800GB": 800e9,
}


def extras(capabilities: list[str]) -> list[Model]:
    return [m for m in EXTRA_MODELS if any(m.capability in cap for cap in capabilities)]


def choose(capabilities: list[str]) -> Model | None:
    for model in MODELS:
        if any(model.capability in cap for cap in capabilities):
            return model
    return None
