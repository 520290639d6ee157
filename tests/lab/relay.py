"""Out-of-band management network for the lab: a TCP relay from ``127.0.0.1:<port>`` inside each lab
namespace to the fabricscope API in the root namespace.

Real clusters send telemetry over a management network, not over the fabric being measured. Here
the lab's namespaces have no route out, so this process opens one listening socket *inside* each
namespace (``setns`` into it, bind, ``setns`` back) and connects to the API from the root
namespace. No interface is added anywhere, and relayed bytes never cross a lab link, so they do
not show in the fabric's counters.

Run: ``python -m tests.lab.relay --target 127.0.0.1:8000 --port 18080 NS1 NS2 ...``
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket

CLONE_NEWNET = 0x40000000


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def listen_in(ns: str, port: int) -> socket.socket:
    """A listening socket bound to 127.0.0.1:port inside network namespace ``ns``."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(64)
            s.setblocking(False)
        finally:
            _setns(home)
    finally:
        os.close(home)
        os.close(target)
    return s


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        w.close()


async def serve(namespaces: list[str], port: int, target: tuple[str, int]) -> None:
    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection(*target)  # from the root namespace
        except OSError:
            cw.close()
            return
        await asyncio.gather(_pipe(cr, uw), _pipe(ur, cw))

    servers = [await asyncio.start_server(handle, sock=listen_in(ns, port)) for ns in namespaces]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("relay ready", flush=True)
    await stop.wait()
    for s in servers:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True, help="host:port of the API in the root namespace")
    ap.add_argument("--port", type=int, required=True, help="port to listen on inside each namespace")
    ap.add_argument("namespaces", nargs="+")
    a = ap.parse_args()
    host, _, port = a.target.rpartition(":")
    asyncio.run(serve(a.namespaces, a.port, (host, int(port))))


if __name__ == "__main__":
    main()
