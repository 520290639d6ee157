"""Issue #46 item 6: one item loses only itself on the sending side. Through a real `fabricscope
serve`: the real HttpSender with a lone surrogate and an integer past a double's range among 100
good items (before: 0 of 100 stored, the server's JSON reader refusing the whole body), and the
real host agent on a NIC whose name is not UTF-8 (a real directory named with byte 0xff, as
/sys/class/net lists such a NIC; before: every sample of the host lost). Names that are not UTF-8
are stored escaped, and the escape gives the original bytes back."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import psycopg
import pytest

from fabricscope.collectors.sinks.http import HttpSender
from fabricscope.core.wiresafe import escape_name, unescape_name
from tests.bus import rows
from tests.host.test_agent_live import SYS_FIXTURE


def test_http_sender_drops_exactly_the_unreadable_items(service_url: str, database_url: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="fabricscope.sender")
    good = rows.sample_items(100, prefix="oni")
    surrogate = {**good[0], "labels": {"k": "a\ud800b"}}
    huge = {**good[1], "value": 10 ** 400}
    sender = HttpSender(service_url, flush_interval_s=60)
    for it in [*good[:40], surrogate, *good[40:70], huge, *good[70:]]:
        assert sender.submit("samples", dict(it))
    assert sender.flush(30), sender.stats
    sender.close()
    rows.assert_exact(database_url, "oni", good)
    assert sender.stats["sent"] == 100 and sender.stats["rejected"] == 2, sender.stats
    assert sender.stats["rejected_batches"] == 0, sender.stats
    assert "item 40: labels.k: a lone surrogate U+D800" in caplog.text, caplog.text
    assert "item 71: value: an integer of 401 digits" in caplog.text, caplog.text


def _sysfs_with(tmp_path: Path, name: bytes) -> Path:
    """The recorded Debian 12 VM's /sys, with eth0 named ``name`` (bytes, as the kernel has it)."""
    root = tmp_path / "sys"
    shutil.copytree(SYS_FIXTURE, root, symlinks=True)
    net = os.fsencode(root / "class" / "net")
    os.rename(os.path.join(net, b"eth0"), os.path.join(net, name))
    return root


def test_agent_keeps_every_sample_of_a_nic_named_in_non_utf8(service_url: str, db_conn: Any,
                                                             tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from fabricscope.collectors.host.agent import agent_command

    raw = b"eth\xff\\0"  # an undecodable byte and a backslash: both must come back
    sys_root = _sysfs_with(tmp_path, raw)
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"host: agentnu8\nsink: {{url: '{service_url}'}}\n"
                   f"nic: {{exclude: [], ethtool: none}}\nrdma: {{enabled: false}}\n"
                   f"storage: {{volumes: [], disks_include: ['nonexistent*']}}\n"
                   f"paths: {{sys_root: '{sys_root}'}}\n")
    app = typer.Typer()
    app.command()(agent_command)
    result = CliRunner().invoke(app, ["--config", str(cfg), "--once"])
    assert result.exit_code == 0, result.output
    got = {(r[0], r[1]): r[2] for r in db_conn.execute(
        "SELECT source, metric, value FROM sample_view WHERE source LIKE 'agentnu8:%'").fetchall()}
    stored = escape_name(os.fsdecode(raw))
    assert stored == "eth\\xff\\\\0"
    assert got[(f"agentnu8:{stored}", "rx_bytes_total")] == 294035580  # the recorded eth0's counter
    assert got[("agentnu8:lo", "oper_up")] == 1
    nic = [k for k in got if k[0] == f"agentnu8:{stored}"]
    assert len(nic) >= 16, nic  # every sample of that NIC, not one lost
    assert unescape_name(stored) == raw  # reversible


def test_nats_writer_stores_the_good_items_of_a_message_orjson_refuses(database_url: str, tmp_path: Path) -> None:
    """A publisher other than ours puts one lone surrogate and one number past a double's range in a
    batch of 100 on the bus, as JSON text (valid JSON, which orjson refuses whole). The real writer
    (a `fabricscope writer` process on a real nats-server) stores the other 99 and dead-letters the
    two, each named; an undecodable-byte escape (\\udcff) in a source is stored escaped (\\xff)."""
    import asyncio
    import json

    import nats

    from tests.bus.conftest import Writers
    from tests.bus.natsd import NatsServer, declare_streams
    from tests.robustness.test_poison_pill import _dead_letters

    good = rows.sample_items(98, prefix="onn")
    odd = {**good[0], "source": "onnx:eth\udcff0"}
    bad1 = {**good[1], "labels": {"k": "a\ud800"}}
    text = json.dumps({"batch_id": "b46-nats", "samples": [*good[:50], bad1, odd, *good[50:]]})
    text = text[:-2] + ', {"ts": 1, "source": "onn0:x", "metric": "m", "value": 1' + "0" * 400 + "}]}"
    srv = NatsServer(tmp_path / "nats")
    srv.start()
    writers = Writers(database_url, srv.url, tmp_path)
    try:
        declare_streams(srv.url)
        writers.start("w46")

        async def publish() -> None:
            nc = await nats.connect(srv.url)
            await nc.jetstream().publish("fabricscope.ingest.samples", text.encode())
            await nc.close()

        asyncio.run(publish())
        assert rows.wait_count(database_url, "onn", 99, 60) == 99, writers.logs()
        dead: list[Any] = []
        for _ in range(30):
            dead = dead or _dead_letters(srv.url)
        assert len(dead) == 1, writers.logs()
        body, reason = dead[0]
        assert [r["loc"] for r in reason] == [["body", "samples", 50, "labels", "k"],
                                              ["body", "samples", 100, "value"]], reason
        assert "lone surrogate U+D800" in reason[0]["msg"] and "past a double" in reason[1]["msg"], reason
        assert len(body["samples"]) == 2 and all("unreadable_item" in it for it in body["samples"])
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT count(*) FROM sample_view WHERE source = %s",
                                ("onnx:eth\\xff0",)).fetchone() == (1,)
    finally:
        writers.stop_all()
        srv.stop()
