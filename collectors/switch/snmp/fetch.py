"""SNMP fetch (asyncio): parallel GETBULK walks of table columns, v2c fast path or pysnmp 7.

SNMPv2c goes through :mod:`.v2c` (a plain asyncio UDP socket and the :mod:`.ber` codec, over 10× less
CPU per varbind than pysnmp); SNMPv3 authPriv goes through pysnmp, which also stays available for v2c
(``engine="pysnmp"``) as the reference the fast path is tested and benchmarked against.

All wanted columns are walked side by side: each GETBULK carries the next OID of every column that
has not finished, and a column drops out of later requests once it leaves its subtree. That keeps
round trips at about ``rows / max_repetitions`` per poll whatever the number of columns. We call the
command generator below ``bulk_cmd`` with numeric ``ObjectName``s so no MIB is loaded or consulted:
the response is used as raw numeric varbinds, which is all :mod:`.parse` needs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any, Literal

from pyasn1.type import univ
from pyasn1.type.univ import Null
from pysnmp.entity.engine import SnmpEngine
from pysnmp.entity.rfc3413 import cmdgen
from pysnmp.hlapi.v3arch.asyncio import auth as hauth
from pysnmp.hlapi.v3arch.asyncio.cmdgen import LCD
from pysnmp.hlapi.v3arch.asyncio.transport import UdpTransportTarget
from pysnmp.proto import rfc1905
from pysnmp.proto.rfc1902 import ObjectName

from fabricscope.core.errors import CollectionError

from ..inventory import Device, SnmpSettings
from . import ber
from .parse import Value
from .v2c import V2cTransport

_AUTH = {
    "md5": hauth.USM_AUTH_HMAC96_MD5,
    "sha": hauth.USM_AUTH_HMAC96_SHA,
    "sha224": hauth.USM_AUTH_HMAC128_SHA224,
    "sha256": hauth.USM_AUTH_HMAC192_SHA256,
    "sha384": hauth.USM_AUTH_HMAC256_SHA384,
    "sha512": hauth.USM_AUTH_HMAC384_SHA512,
}
_PRIV = {
    "des": hauth.USM_PRIV_CBC56_DES,
    "aes": hauth.USM_PRIV_CFB128_AES,
    "aes192": hauth.USM_PRIV_CFB192_AES,
    "aes256": hauth.USM_PRIV_CFB256_AES,
}
# Keep a GETBULK response well under common agent message limits (net-snmp: 1472 B default on
# the wire is fragmented fine over UDP, but many switch agents cap PDUs near 8-16 KiB).
MAX_VARBINDS_PER_REQUEST = 400
_Raw = Value | ber.Special | None
_SKIP = (rfc1905.NoSuchObject, rfc1905.NoSuchInstance, rfc1905.EndOfMibView)


def _auth_data(device: Device, s: SnmpSettings) -> hauth.CommunityData | hauth.UsmUserData:
    if s.version == "2c":
        secret = device.secret(s.community)
        assert secret is not None
        return hauth.CommunityData(secret.get_secret_value(), mpModel=1)
    assert s.v3 is not None
    auth_key, priv_key = device.secret(s.v3.auth_key), device.secret(s.v3.priv_key)
    assert auth_key is not None and priv_key is not None
    return hauth.UsmUserData(
        s.v3.user,
        authKey=auth_key.get_secret_value(),
        privKey=priv_key.get_secret_value(),
        authProtocol=_AUTH[s.v3.auth_protocol],
        privProtocol=_PRIV[s.v3.priv_protocol],
    )


def plain(value: Any) -> Value | None:
    """pyasn1 value → int / bytes / str (``None`` for noSuch* / endOfMibView)."""
    if isinstance(value, _SKIP):
        return None
    if isinstance(value, univ.OctetString):  # also IpAddress, Opaque (rfc1902 types subclass these)
        return bytes(value.asOctets())
    if isinstance(value, univ.ObjectIdentifier):  # pyasn1 decodes OID values as univ, not rfc1902
        return str(value)
    return int(value)


class SnmpClient:
    """One device's SNMP session: engine, credentials and transport, reused across polls."""

    def __init__(self, device: Device, engine: Literal["auto", "pysnmp"] = "auto") -> None:
        if device.snmp is None:
            raise CollectionError(f"{device.name}: no snmp settings")
        self.device = device
        self.settings = device.snmp
        self._engine: SnmpEngine | None = None  # only built when pysnmp is used (v3, or asked for)
        self._auth = _auth_data(device, device.snmp)
        self._target: UdpTransportTarget | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.fast: V2cTransport | None = None
        if engine == "auto" and device.snmp.version == "2c":
            secret = device.secret(device.snmp.community)
            assert secret is not None
            tries = self.settings.retries + 1
            self.fast = V2cTransport(device.name, device.address, self.settings.port,
                                     secret.get_secret_value().encode(), max(0.2, device.timeout / tries),
                                     self.settings.retries)  # fmt: skip

    async def _target_for(self) -> UdpTransportTarget:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # pysnmp binds its UDP transport to the loop it first ran on: a new loop needs a new engine
            if self._loop is not None:
                self.close()
                self._engine = None
            self._loop, self._target = loop, None
        if self._target is None:
            tries = self.settings.retries + 1
            self._target = await UdpTransportTarget.create(
                (self.device.address, self.settings.port),
                timeout=max(0.2, self.device.timeout / tries),
                retries=self.settings.retries,
            )
        return self._target

    @property
    def engine(self) -> SnmpEngine:
        if self._engine is None:
            self._engine = SnmpEngine()
        return self._engine

    async def _bulk(self, oids: Sequence[str], reps: int, non_rep: int = 0) -> Sequence[tuple[str, _Raw]]:
        """Varbinds with numeric names; ``None`` (pysnmp) or a :class:`ber.Special` (fast) ends a column."""
        if self.fast is not None:
            return await self.fast.bulk(oids, reps, non_rep)
        return [(str(name), plain(val)) for name, val in await self._pysnmp_bulk(oids, reps, non_rep)]

    async def _pysnmp_bulk(self, oids: Sequence[str], reps: int, non_rep: int) -> list[tuple[Any, Any]]:
        target = await self._target_for()
        addr_name, _ = LCD.configure(self.engine, self._auth, target, b"")
        future: asyncio.Future[list[tuple[Any, Any]]] = asyncio.get_running_loop().create_future()

        def done(_engine: Any, _handle: Any, err_ind: Any, err_status: Any, _idx: Any, vbs: Any, _ctx: Any):
            if future.done():
                return
            if err_ind:
                future.set_exception(CollectionError(f"{self.device.name}: {err_ind}"))
            elif err_status and int(err_status):
                future.set_exception(CollectionError(f"{self.device.name}: {err_status.prettyPrint()}"))
            else:
                future.set_result(list(vbs))

        cmdgen.BulkCommandGenerator().send_varbinds(
            self.engine, addr_name, None, b"", non_rep, reps,
            [(ObjectName(o), Null("")) for o in oids], done, None,
        )  # fmt: skip
        return await future

    async def walk(self, columns: Sequence[str], scalars: Sequence[str] = ()) -> list[tuple[str, Value]]:
        """Walk ``columns`` in parallel and GET-NEXT ``scalars``' parents; numeric varbinds out.

        The scalars ride in the first GETBULK as non-repeaters (one GET-NEXT each), so they cost no
        round trip of their own.
        """
        out: list[tuple[str, Value]] = []
        parents = [s.rpartition(".")[0] for s in scalars]
        cursor = {c: c for c in columns}
        reps = self.settings.max_repetitions
        while cursor or parents:
            nr = len(parents)
            batch = list(cursor)[: max(1, (MAX_VARBINDS_PER_REQUEST - nr) // reps)]
            vbs = await self._bulk(parents + [cursor[c] for c in batch], reps, nr)
            for name, v in vbs[:nr]:
                if v is not None and not isinstance(v, ber.Special) and name in scalars:
                    out.append((name, v))
            vbs, parents = vbs[nr:], []
            if batch and not vbs:
                raise CollectionError(f"{self.device.name}: empty GETBULK response")
            finished: set[str] = set()
            n = len(batch)
            for i, (oid, v) in enumerate(vbs):
                col = batch[i % n]
                if col in finished:
                    continue
                if v is None or isinstance(v, ber.Special) or not oid.startswith(col + "."):
                    finished.add(col)
                    continue
                out.append((oid, v))
                cursor[col] = oid
            if len(vbs) < n:  # agent truncated even the first row: the rest of the batch is unknown
                finished.update(batch[len(vbs) :])
            for col in finished:
                cursor.pop(col, None)
        return out

    def close(self) -> None:
        if self.fast is not None:
            self.fast.close()
        # after the loop it ran on has closed, the transport cannot be closed through it any more
        if self._engine is not None:
            with contextlib.suppress(RuntimeError):
                self._engine.close_dispatcher()
