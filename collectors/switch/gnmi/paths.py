"""OpenConfig path → canonical metric table for gNMI, and the subscriptions we ask for.

Paths are element names with keys and module prefixes (``oc-if:``) removed. Two vendor leaves seen
in a real Ciena stream are aliases here (``in-crc-error-pkts``, ``link-flap-events``); a table row,
not a branch in code.
"""

from __future__ import annotations

_IF = ("interfaces", "interface")
_C = (*_IF, "state", "counters")
_E = (*_IF, "ethernet", "state", "counters")

# path → (metric, rank): several paths may feed one metric; the lowest rank present wins
COUNTERS: dict[tuple[str, ...], tuple[str, int]] = {
    (*_C, "in-octets"): ("rx_bytes_total", 0),
    (*_C, "out-octets"): ("tx_bytes_total", 0),
    (*_C, "in-pkts"): ("rx_packets_total", 0),
    (*_C, "out-pkts"): ("tx_packets_total", 0),
    (*_C, "in-discards"): ("rx_discards_total", 0),
    (*_C, "out-discards"): ("tx_discards_total", 0),
    (*_C, "in-errors"): ("rx_errors_total", 0),
    (*_C, "out-errors"): ("tx_errors_total", 0),
    (*_C, "in-fcs-errors"): ("rx_fcs_errors_total", 0),
    (*_E, "in-crc-errors"): ("rx_fcs_errors_total", 1),
    (*_C, "in-crc-error-pkts"): ("rx_fcs_errors_total", 2),  # Ciena
    (*_E, "in-mac-pause-frames"): ("rx_pause_frames_total", 0),
    (*_E, "out-mac-pause-frames"): ("tx_pause_frames_total", 0),
    (*_C, "carrier-transitions"): ("carrier_transitions_total", 0),
    (*_C, "link-flap-events"): ("link_down_total", 0),  # Ciena: one event per down/up cycle
}
# openconfig-qos egress queues: /qos/interfaces/interface[interface-id]/output/queues/queue[name]/state.
# ``ecn-marked-pkts`` is not in the OpenConfig model; SONiC's management framework and NVIDIA Cumulus
# Linux (its gNMI metric list) augment it there. ``max-queue-len`` is the model's peak queue length
# (octets); dropped-octets has no canonical name.
_Q = ("qos", "interfaces", "interface", "output", "queues", "queue", "state")
COUNTERS.update({
    (*_Q, "transmit-pkts"): ("tx_queue_packets_total", 0),
    (*_Q, "transmit-octets"): ("tx_queue_bytes_total", 0),
    (*_Q, "dropped-pkts"): ("queue_dropped_packets_total", 0),
    (*_Q, "ecn-marked-pkts"): ("ecn_marked_packets_total", 0),
    (*_Q, "max-queue-len"): ("queue_watermark_bytes", 0),
})
# NVIDIA Cumulus Linux 5.13+ gNMI (documented metric list, CumulusNetworks/docs "gNMI Streaming"):
# no ``dropped-pkts``; WRED and no-buffer drops of a queue come as two leaves, which rows of one
# metric and one rank add up (see ``parse``). Per-priority PFC frames sit under
# state/switch-priority[priority]. Its ``watermark-max`` leaves count buffer cells, not bytes: left out.
_NV_PRIO = ("qos", "interfaces", "interface", "state", "switch-priority", "counters")
COUNTERS.update({
    (*_Q, "wred-dropped-pkts"): ("queue_dropped_packets_total", 1),
    (*_Q, "no-buffer-uc-dropped-pkts"): ("queue_dropped_packets_total", 1),
    (*_NV_PRIO, "in-pause-pkts"): ("rx_pause_frames_total", 0),
    (*_NV_PRIO, "out-pause-pkts"): ("tx_pause_frames_total", 0),
})
# Vendor-native models, mapped where public material shows the leaves (tests/fixtures/gnmic-srl/SOURCES.md).
# Nokia SR Linux srl_nokia-interfaces: /interface[name]/statistics/<leaf> (gnmic output of SR Linux
# 23-24 labs: in-octets, out-octets, in-discarded-packets, in-error-packets, carrier-transitions ...).
_SRL = ("interface", "statistics")
_SRL_ETH = ("interface", "ethernet", "statistics")
COUNTERS.update({
    (*_SRL, "in-octets"): ("rx_bytes_total", 0),
    (*_SRL, "out-octets"): ("tx_bytes_total", 0),
    (*_SRL, "in-packets"): ("rx_packets_total", 0),
    (*_SRL, "out-packets"): ("tx_packets_total", 0),
    (*_SRL, "in-discarded-packets"): ("rx_discards_total", 0),
    (*_SRL, "out-discarded-packets"): ("tx_discards_total", 0),
    (*_SRL, "in-error-packets"): ("rx_errors_total", 0),
    (*_SRL, "out-error-packets"): ("tx_errors_total", 0),
    (*_SRL, "in-fcs-error-packets"): ("rx_fcs_errors_total", 0),
    (*_SRL, "carrier-transitions"): ("carrier_transitions_total", 0),
    (*_SRL_ETH, "in-mac-pause-frames"): ("rx_pause_frames_total", 0),
    (*_SRL_ETH, "out-mac-pause-frames"): ("tx_pause_frames_total", 0),
})
# Nokia SR OS native state tree: /state/port[port-id]/statistics/<leaf>.
_SROS = ("state", "port", "statistics")
COUNTERS.update({
    (*_SROS, "in-octets"): ("rx_bytes_total", 0),
    (*_SROS, "out-octets"): ("tx_bytes_total", 0),
    (*_SROS, "in-packets"): ("rx_packets_total", 0),
    (*_SROS, "out-packets"): ("tx_packets_total", 0),
    (*_SROS, "in-discards"): ("rx_discards_total", 0),
    (*_SROS, "out-discards"): ("tx_discards_total", 0),
    (*_SROS, "in-errors"): ("rx_errors_total", 0),
    (*_SROS, "out-errors"): ("tx_errors_total", 0),
})
# a list element whose key becomes a sample label: element → (label, key of that list)
LABEL_ELEMENTS: dict[str, tuple[str, str]] = {"queue": ("queue", "name"), "switch-priority": ("priority", "priority")}
INTERFACE_KEYS = ("name", "interface-id")  # the interface list's key: openconfig-interfaces, openconfig-qos
# list element -> its keys that name an interface: OpenConfig and SR Linux ``interface``, SR OS ``port``
INTERFACE_ELEMENTS: dict[str, tuple[str, ...]] = {"interface": INTERFACE_KEYS, "port": ("port-id",)}

OPER_STATUS = (*_IF, "state", "oper-status")
OPER_STATES = (OPER_STATUS, ("interface", "oper-state"), ("state", "port", "oper-state"))  # OC, SR Linux, SR OS
LAST_CLEAR = (*_C, "last-clear")
NAME_LEAF = (*_C, "name")  # Ciena puts the interface name as a leaf next to the counters
PORT_SPEED = (*_IF, "ethernet", "state", "port-speed")
# leaves read above or on purpose not turned into samples (their keys, names, the neighbour table):
# every other leaf is listed in ``unmapped`` with how often it came
KNOWN_LEAVES = frozenset({NAME_LEAF, (*_IF, "name"), (*_IF, "state", "name"), (*_IF, "config", "name"),
                          ("interface", "name"), ("state", "port", "port-id")})

# (path, mode) pairs the collector subscribes to; SAMPLE for counters, ON_CHANGE for state
SUBSCRIPTIONS: tuple[tuple[str, str], ...] = (
    ("/interfaces/interface/state/counters", "SAMPLE"),
    ("/interfaces/interface/ethernet/state/counters", "SAMPLE"),
    ("/interfaces/interface/state/oper-status", "ON_CHANGE"),
    ("/interfaces/interface/ethernet/state/port-speed", "ON_CHANGE"),
    ("/lldp/interfaces/interface/neighbors/neighbor/state", "ON_CHANGE"),
)
# Asked for only when the target's Capabilities name the model (an unknown path can fail a whole
# Subscribe on some targets): model name → (path, mode) pairs.
MODEL_SUBSCRIPTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "openconfig-qos": (("/qos/interfaces/interface/output/queues/queue/state", "SAMPLE"),),
}

# SONiC: the server advertises the model "sonic-db"; its COUNTERS_DB virtual paths (sonic-gnmi
# virtual_db) name ports and queues already, so no oid map is needed for these. Sent as a second
# Subscribe with prefix target COUNTERS_DB (one prefix per SubscriptionList).
SONIC_MODEL = "sonic-db"
SONIC_SUBSCRIPTIONS: tuple[tuple[str, str], ...] = (
    ("COUNTERS/Ethernet*", "SAMPLE"),  # port stats incl. SAI_PORT_STAT_PFC_<n>_RX/TX_PKTS
    ("COUNTERS/Ethernet*/Queues", "SAMPLE"),  # queue stats, watermarks, PFC watchdog
    ("COUNTERS/Ethernet*/Pfcwd", "SAMPLE"),
    ("PERIODIC_WATERMARKS/Ethernet*/PriorityGroups", "SAMPLE"),
)
