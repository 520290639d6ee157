"""``ethtool -S`` without a fork: the SIOCETHTOOL ioctl the ethtool binary itself uses.

Forking ``ethtool`` for every interface every second costs a few milliseconds of CPU each
(bench/agent_cost.py measures it), which alone breaks the agent's 1%-of-a-core budget on a
16-NIC host. The ioctl reads the same driver strings and u64 values in microseconds.

Layouts are from include/uapi/linux/ethtool.h. ETHTOOL_GDRVINFO gives the driver name and the
current number of stats; it is asked on every read because GSTATS writes as many u64 as the
driver has *now* (after a driver reload the count may change), so the buffer must match.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import socket
import struct
import threading

from fabricscope.collectors.host.ethtool_maps import stat_key
from fabricscope.core.errors import CollectionError

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x00000003
ETHTOOL_GSTRINGS = 0x0000001B
ETHTOOL_GSTATS = 0x0000001D
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16

# struct ethtool_drvinfo: cmd, driver[32], version[32], fw_version[32], bus_info[32],
# erom_version[32], reserved2[12], n_priv_flags, n_stats, testinfo_len, eedump_len, regdump_len
_DRVINFO = struct.Struct("=I32s32s32s32s32s12sIIIII")


class EthtoolIoctl:
    """Reads driver name and ``ethtool -S`` counters of interfaces in this network namespace."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._names: dict[str, tuple[int, list[str]]] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self._sock.close()

    def _ioctl(self, iface: str, buf: ctypes.Array[ctypes.c_char]) -> None:
        # os.fsencode: a name that is not UTF-8 (surrogate escapes, PEP 383) is its own bytes again
        ifreq = struct.pack("16sP", os.fsencode(iface)[: IFNAMSIZ - 1], ctypes.addressof(buf))
        try:
            fcntl.ioctl(self._sock.fileno(), SIOCETHTOOL, ifreq)
        except OSError as exc:
            raise CollectionError(f"{iface}: SIOCETHTOOL failed: {exc}") from exc

    def drvinfo(self, iface: str) -> tuple[str, int]:
        buf = ctypes.create_string_buffer(_DRVINFO.pack(ETHTOOL_GDRVINFO, *([b""] * 6), 0, 0, 0, 0, 0))
        self._ioctl(iface, buf)
        fields = _DRVINFO.unpack(buf.raw[: _DRVINFO.size])
        return fields[1].split(b"\0", 1)[0].decode(), int(fields[8])

    def _strings(self, iface: str, n: int) -> list[str]:
        cached = self._names.get(iface)
        if cached is not None and cached[0] == n:
            return cached[1]
        buf = ctypes.create_string_buffer(struct.pack("=III", ETHTOOL_GSTRINGS, ETH_SS_STATS, n)
                                          + b"\0" * (n * ETH_GSTRING_LEN))
        self._ioctl(iface, buf)
        raw = buf.raw[12:12 + n * ETH_GSTRING_LEN]
        names = [raw[i:i + ETH_GSTRING_LEN].split(b"\0", 1)[0].decode(errors="replace")
                 for i in range(0, len(raw), ETH_GSTRING_LEN)]
        self._names[iface] = (n, names)
        return names

    def stats(self, iface: str) -> tuple[str, dict[str, float]]:
        """(driver, {key: value}) exactly as ``ethtool -i`` / ``ethtool -S`` would print them."""
        with self._lock:
            driver, n = self.drvinfo(iface)
            if n == 0:
                return driver, {}
            names = self._strings(iface, n)
            buf = ctypes.create_string_buffer(struct.pack("=II", ETHTOOL_GSTATS, n) + b"\0" * (8 * n))
            self._ioctl(iface, buf)
            got = struct.unpack_from("=I", buf.raw, 4)[0]
            if got != n:  # the driver changed between the two calls: try again next poll
                self._names.pop(iface, None)
                raise CollectionError(f"{iface}: stats count changed ({n} -> {got})")
            values = struct.unpack_from(f"={n}Q", buf.raw, 8)
            out: dict[str, float] = {}
            for name, v in zip(names, values, strict=True):
                out[stat_key(name, out)] = float(v)  # as the text parser keys them (repeats numbered)
            return driver, out
