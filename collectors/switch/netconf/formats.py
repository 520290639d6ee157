"""``fabricscope parse`` format ``netconf-reply``: an ``<rpc-reply>`` to ``<get>`` or to a vendor RPC.

The reply does not say which model it is in, so every known model (interfaces models and the
extra ones such as openconfig-qos, Junos native included) reads it and the one that finds the most
samples wins: the models stay a table, with no per-vendor sniffing code.
"""

from __future__ import annotations

from pathlib import Path

from fabricscope.collectors.formats import Format, Reading
from fabricscope.core.errors import ParseError

from .models import EXTRA_MODELS, MODELS
from .parse import parse


def read_netconf_reply(path: Path, device: str, ts: float) -> Reading:
    raw = path.read_bytes()
    best: Reading | None = None
    first_error: ParseError | None = None
    for model in (*MODELS, *EXTRA_MODELS):
        try:
            poll = parse(device, raw, model, ts)
        except ParseError as exc:  # not XML, or not this model's reply shape: try the next model
            first_error = first_error or exc
            continue
        if best is None or len(poll.samples) > len(best.samples):
            best = Reading(samples=poll.samples, problems=poll.problems)
    if best is None and first_error is not None and "not XML" in str(first_error):
        raise first_error
    if best is None or not best.samples:
        raise ParseError("no known model (openconfig, IOS-XR, Junos, ietf-interfaces, openconfig-qos) "
                         "found interfaces in this reply")
    return best


# a reply, or the body of one saved without its envelope (Junos CLI `| display xml` output included)
_BODY_TAGS = ("<rpc-reply", "<interface-information")

FORMATS = (
    Format("netconf-reply", "NETCONF <rpc-reply> (openconfig-interfaces/-qos, IOS-XR, Junos native, ietf)",
           sniff=lambda _p, head: any(tag in head for tag in _BODY_TAGS), read=read_netconf_reply, priority=50),
)
