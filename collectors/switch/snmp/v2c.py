"""SNMPv2c GetBulk over a plain asyncio UDP socket, with the :mod:`.ber` codec.

One connected datagram socket per device (the kernel then only hands us that agent's replies), one
request in flight per device, the same request-id on every retry so a late reply to an earlier try
still counts, as net-snmp does. Many devices share one event loop: while one agent computes its
reply the loop serves the others, so a process is bound by CPU per varbind, not by agent latency.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
from collections.abc import Sequence

from fabricscope.core.errors import CollectionError, ParseError

from . import ber

log = logging.getLogger(__name__)


class _Protocol(asyncio.DatagramProtocol):
    def __init__(self, owner: V2cTransport) -> None:
        self.owner = owner

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.owner._received(data)

    def error_received(self, exc: Exception) -> None:
        # ICMP port unreachable and the like: remembered for the timeout message, the retry goes on
        self.owner._last_error = exc


class V2cTransport:
    """GETBULK round trips to one v2c agent; returns ``(numeric OID, decoded value)`` pairs."""

    def __init__(self, device: str, address: str, port: int, community: bytes, timeout: float,
                 retries: int) -> None:  # fmt: skip
        self.device, self.address, self.port = device, address, port
        self._community = community
        self.timeout, self.retries = timeout, retries
        self._transport: asyncio.DatagramTransport | None = None
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: tuple[int, asyncio.Future[ber.Response]] | None = None
        self._last_error: Exception | None = None
        self._next_id = random.randrange(1, 2**30)
        self.malformed = 0  # datagrams dropped as undecodable (counted for tests and logs)

    def __repr__(self) -> str:  # the community is a secret: never in a repr
        return f"V2cTransport({self.device!r}, {self.address}:{self.port})"

    async def _open(self) -> asyncio.DatagramTransport:
        loop = asyncio.get_running_loop()
        if self._transport is not None and self._loop is loop and not self._transport.is_closing():
            return self._transport
        self.close()
        sock = None
        try:
            infos = await loop.getaddrinfo(self.address, self.port, type=socket.SOCK_DGRAM)
            family, _, proto, _, addr = infos[0]
            # our own socket object, so close() works even after the loop it ran on has closed
            sock = socket.socket(family, socket.SOCK_DGRAM, proto)
            sock.setblocking(False)
            sock.connect(addr)
            transport, _ = await loop.create_datagram_endpoint(lambda: _Protocol(self), sock=sock)
        except OSError as exc:
            if sock is not None:
                sock.close()
            raise CollectionError(f"{self.device}: cannot open UDP to {self.address}:{self.port}: {exc}") from exc
        self._transport, self._loop, self._sock = transport, loop, sock
        return transport

    def _received(self, data: bytes) -> None:
        try:
            resp = ber.decode_response(data)
        except ParseError as exc:
            self.malformed += 1
            log.warning("%s: malformed SNMP reply dropped (%d octets): %s", self.device, len(data), exc)
            return
        waiting = self._waiting
        if waiting is None or resp.request_id != waiting[0] or waiting[1].done():
            return  # a reply to a request we gave up on, or not ours at all
        if resp.community != self._community:
            log.warning("%s: reply with another community dropped", self.device)
            return
        waiting[1].set_result(resp)

    async def bulk(
        self, oids: Sequence[str], repetitions: int, non_repeaters: int = 0
    ) -> list[tuple[str, ber.Decoded]]:
        transport = await self._open()
        self._next_id = self._next_id % (2**31 - 1) + 1
        request_id = self._next_id
        message = ber.encode_getbulk(self._community, request_id, non_repeaters, repetitions, list(oids))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ber.Response] = loop.create_future()
        self._waiting, self._last_error = (request_id, future), None
        tries = 1
        timer: asyncio.TimerHandle | None = None

        # a timer per try rather than wait_for(): no task per request, which matters at ~25 per poll
        def expired() -> None:
            nonlocal tries, timer
            if future.done():
                return
            if tries > self.retries:
                why = f" ({self._last_error})" if self._last_error else ""
                future.set_exception(CollectionError(f"{self.device}: no SNMP response after {tries} tries{why}"))
                return
            tries += 1
            transport.sendto(message)
            timer = loop.call_later(self.timeout, expired)

        transport.sendto(message)
        timer = loop.call_later(self.timeout, expired)
        try:
            resp = await future
        finally:
            if timer is not None:
                timer.cancel()
            self._waiting = None
        if resp.error_status:
            status = ber.ERROR_STATUS[resp.error_status] if 0 <= resp.error_status < len(ber.ERROR_STATUS) else "?"
            raise CollectionError(f"{self.device}: {status} (error-status {resp.error_status}, "
                                  f"index {resp.error_index})")  # fmt: skip
        return resp.varbinds

    def close(self) -> None:
        if self._transport is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._transport.close()
            elif self._sock is not None:
                self._sock.close()  # the loop is gone: release the descriptor ourselves
            self._transport = self._sock = None
