"""Switch collectors: SNMP, NETCONF and gNMI port counters, LLDP discovery, and the poll scheduler.

Each protocol package splits ``fetch`` (talks to the device) from ``parse`` (pure, recorded replies
in, :class:`fabricscope.core.model.Sample` out). Vendor differences live in mapping tables, not code.
"""
