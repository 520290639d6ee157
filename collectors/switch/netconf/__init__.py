"""NETCONF (ncclient) port counters: openconfig-interfaces, IOS-XR native, ietf-interfaces."""
