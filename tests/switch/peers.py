"""Real SNMP/NETCONF peers for the slow tests: net-snmp snmpd, snmpsim, yuma123 netconfd + sshd.

All listen on 127.0.0.1 high ports and are stopped by the context managers that start them.
snmpsim and netconfd run as an unprivileged user (created when missing), as both refuse or
misbehave as root; the Python that runs snmpsim must be readable by that user (see README).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support import free_port

PEER_USER = "fabricscope-peer"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_user(name: str = PEER_USER) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", name], check=True)
        return pwd.getpwnam(name)


def _peer_dir(user: str) -> Path:
    """A work dir the peer user can reach (pytest's tmp_path is inside a root-only directory)."""
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="fs-peer-"))
    d.chmod(0o755)
    shutil.chown(d, user)
    return d


def wait_snmp(port: int, community: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["snmpget", "-M", "/dev/null", "-v2c", "-c", community, "-t", "0.5", "-r", "0",
                            f"127.0.0.1:{port}", "1.3.6.1.2.1.1.3.0"], capture_output=True)  # fmt: skip
        if r.returncode == 0:
            return
        time.sleep(0.2)
    raise RuntimeError(f"SNMP agent on udp:{port} did not answer")


SNMPD_CONF = """agentAddress udp:127.0.0.1:{port}
rocommunity {community} 127.0.0.1
createUser {user} SHA "{auth}" AES "{priv}"
rouser {user} priv
"""


class Snmpd:
    def __init__(self, workdir: Path, community: str = "fs-test", user: str = "fsuser",
                 auth: str = "auth-pass-123", priv: str = "priv-pass-123") -> None:  # fmt: skip
        self.dir, self.community, self.user, self.auth, self.priv = workdir, community, user, auth, priv
        self.port = free_udp_port()
        self.proc: subprocess.Popen[bytes] | None = None
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "snmpd.conf").write_text(SNMPD_CONF.format(port=self.port, community=community, user=user,
                                                               auth=auth, priv=priv))  # fmt: skip

    def start(self) -> None:
        env = {**os.environ, "SNMP_PERSISTENT_DIR": str(self.dir / "persist"), "MIBS": "", "MIBDIRS": "/dev/null"}
        self.proc = subprocess.Popen(
            ["snmpd", "-f", "-Lf", str(self.dir / "snmpd.log"), "-C", "-c", str(self.dir / "snmpd.conf"),
             "-p", str(self.dir / "snmpd.pid")], env=env)  # fmt: skip
        wait_snmp(self.port, self.community)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


@contextlib.contextmanager
def snmpd(workdir: Path) -> Iterator[Snmpd]:
    agent = Snmpd(workdir)
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()


def _sim_python(user: str) -> list[str]:
    """A Python the peer user can run snmpsim with: ours, or the system one on our site-packages
    (our interpreter may live in root's home, which that user cannot read)."""
    import sysconfig

    site = sysconfig.get_paths()["purelib"]
    for cmd in ([sys.executable], ["env", f"PYTHONPATH={site}", "/usr/bin/python3"]):
        probe = subprocess.run(["runuser", "-u", user, "--", *cmd, "-c", "import snmpsim.commands.responder"],
                               capture_output=True)  # fmt: skip
        if probe.returncode == 0:
            return cmd
    raise RuntimeError(
        f"{user} can run neither {sys.executable} nor /usr/bin/python3 with {site} (snmpsim); "
        "make the virtualenv o+rx (see the README section on switch collectors)"
    )


@contextlib.contextmanager
def snmpsim(workdir: Path, recordings: dict[str, Path]) -> Iterator[int]:
    """snmpsim-command-responder serving ``community → .snmprec(.bz2)`` on a free UDP port."""
    import bz2

    user = ensure_user().pw_name
    workdir = _peer_dir(user)
    data = workdir / "snmpsim-data"
    data.mkdir(parents=True, exist_ok=True)
    for community, src in recordings.items():
        raw = bz2.decompress(src.read_bytes()) if src.suffix == ".bz2" else src.read_bytes()
        (data / f"{community}.snmprec").write_bytes(raw)
    shutil.chown(workdir, user)
    for p in [data, *data.iterdir()]:
        shutil.chown(p, user)
    port = free_udp_port()
    cmd = [*_sim_python(user), "-m", "snmpsim.commands.responder", f"--data-dir={data}",
           f"--agent-udpv4-endpoint=127.0.0.1:{port}", f"--cache-dir={workdir / 'cache'}",
           f"--logging-method=file:{workdir / 'snmpsim.log'}"]  # fmt: skip
    proc = subprocess.Popen(["runuser", "-u", user, "--", *cmd], cwd=workdir)
    try:
        wait_snmp(port, next(iter(recordings)), timeout=60)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


SSHD_CONF = """Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/hostkey
PidFile {dir}/sshd.pid
PasswordAuthentication yes
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin no
AllowUsers {user}
Subsystem netconf "/usr/sbin/netconf-subsystem --ncxserver-sockname={port}@{dir}/ncx.sock"
"""


@contextlib.contextmanager
def netconfd(workdir: Path, password: str) -> Iterator[int]:
    """yuma123 netconfd (ietf-interfaces) behind OpenSSH's netconf subsystem, as the SSH user."""
    user = ensure_user().pw_name
    subprocess.run(["chpasswd"], input=f"{user}:{password}".encode(), check=True)
    workdir = _peer_dir(user)
    port = free_port()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(workdir / "hostkey")], check=True)
    (workdir / "sshd_config").write_text(SSHD_CONF.format(port=port, dir=workdir, user=user))
    bindir = workdir / "bin"
    bindir.mkdir(exist_ok=True)
    helper = bindir / "get-interface-ipv4"  # netconfd's ietf-interfaces module shells out to it
    helper.write_text("#!/bin/sh\nexit 0\n")
    helper.chmod(0o755)
    shutil.chown(workdir, user)
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", str(workdir / "sshd_config"),
                             "-E", str(workdir / "sshd.log")])  # fmt: skip
    env = f"PATH={bindir}:/usr/sbin:/usr/bin:/sbin:/bin"
    nc = subprocess.Popen(
        ["runuser", "-u", user, "--", "env", env, f"HOME={workdir}", "netconfd", "--module=ietf-interfaces",
         f"--port={port}", "--no-startup", f"--superuser={user}", f"--ncxserver-sockname={workdir}/ncx.sock",
         f"--log={workdir}/netconfd.log"], cwd=workdir)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (workdir / "ncx.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield port
    finally:
        for p in (nc, sshd):
            p.terminate()
            p.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def loopback_traffic(n: int = 50, size: int = 1000) -> None:
    """Send ``n`` UDP datagrams of ``size`` bytes to the discard port on loopback (moves lo's counters)."""
    for _ in range(n):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"y" * size, ("127.0.0.1", 9))


def netconf_device(name: str, port: int, password_env: str):  # type: ignore[no-untyped-def]
    """An inventory device polling netconfd's ``lo`` over SSH as the peer user."""
    from fabricscope.collectors.switch.inventory import parse_inventory

    return parse_inventory({"devices": [{"name": name, "address": "127.0.0.1", "protocols": ["netconf"],
                                         "interval": 10, "timeout": 8, "include": ["lo"],
                                         "netconf": {"port": port, "username": PEER_USER,
                                                     "password": {"env": password_env},
                                                     "hostkey_verify": False}}]}).devices[0]  # fmt: skip


def netconf_two_polls(workdir: Path, name: str, password: str, pause_s: float,
                      password_env: str = "FS_NC_PW"):  # type: ignore[no-untyped-def]
    """Against a real netconfd: poll ``lo`` of device ``name``, send loopback traffic, wait ``pause_s``,
    poll again. The caller puts the password in ``password_env``. Returns (collector, first, second)."""
    import asyncio

    from fabricscope.collectors.switch.netconf.collector import NetconfCollector

    with netconfd(workdir, password) as port:
        col = NetconfCollector(netconf_device(name, port, password_env))
        first = asyncio.run(col.poll())
        loopback_traffic()
        time.sleep(pause_s)
        second = asyncio.run(col.poll())
        asyncio.run(col.aclose())
    return col, first, second
