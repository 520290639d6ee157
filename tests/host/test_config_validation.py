"""The agent config is validated by pydantic models of the file: an unknown key or a wrong type is a
ConfigError naming the field path, never echoing the value (it may be a pasted token)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricscope.collectors.host.config import load_config, parse_config
from fabricscope.core.errors import ConfigError

SINK = {"url": "http://127.0.0.1:8000"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sink": SINK, "nic": {"interval_s": 1, "intreval_s": 2}}, "nic.intreval_s: unknown field"),
        ({"sink": {**SINK, "tokne": "abc"}}, "sink.tokne: unknown field"),
        ({"sink": SINK, "events": {"pfc_storm": {"rate": 5}}}, "events.pfc_storm.rate: unknown field"),
        ({"sink": SINK, "paths": {"sysroot": "/host/sys"}}, "paths.sysroot: unknown field"),
        ({"sink": SINK, "verbose": True}, "verbose: unknown field"),
    ],
)
def test_unknown_key_names_its_path(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"sink": SINK, "nic": {"interval_s": 0}}, "nic.interval_s: must be > 0"),
        ({"sink": SINK, "nic": {"interval_s": "1s"}}, "nic.interval_s: expected a number"),
        ({"sink": SINK, "rdma": {"interval_s": True}}, "rdma.interval_s: expected a number"),
        ({"sink": SINK, "nic": {"extras": "yes"}}, "nic.extras: expected true or false"),
        ({"sink": SINK, "storage": {"volumes": "/mnt/ckpt"}}, "storage.volumes: expected a list"),
        ({"sink": SINK, "storage": {"volumes": ["/mnt/a", 7]}}, "storage.volumes[1]: expected a string"),
        ({"sink": {**SINK, "batch_max": 2.5}}, "sink.batch_max: expected an integer"),
        ({"sink": {**SINK, "token": 123456}}, "sink.token: expected a string"),
        ({"sink": SINK, "events": {"ecn_burst": {"min_duration_s": -1}}},
         "events.ecn_burst.min_duration_s: must be >= 0"),
        ({"sink": SINK, "nic": ["eth0"]}, "nic: expected a mapping"),
        ({"sink": SINK, "nccl_inspector": {"max_bytes_per_poll": 0}}, "nccl_inspector.max_bytes_per_poll: must be > 0"),
    ],
)
def test_wrong_type_or_range_names_its_path(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value) == message
    assert "123456" not in str(err.value)


def test_empty_sections_mean_defaults_and_rdma_follows_nic(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("host: n1\nsink:\n  url: https://fs:8000\nnic:\n  interval_s: 2\nrdma:\nevents:\n  pfc_storm:\n")
    cfg = load_config(path)
    assert cfg.host == "n1" and cfg.rdma.interval_s == 2.0 and cfg.nic.exclude == ("lo",)
    assert cfg.events.pfc_storm.rate_per_s == 1000.0 and cfg.sys_root == Path("/sys")


@pytest.mark.parametrize("url", ["http://fs:8000", "https://fs", "nats://bus1:4222,nats://bus2:4222", "tls://bus:4222"])
def test_sink_url_takes_every_scheme_make_sink_sends_over(url: str) -> None:
    assert parse_config({"host": "n1", "sink": {"url": url}}).sink.url == url


def test_sink_url_of_another_scheme_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^sink\.url: .*nats://"):
        parse_config({"host": "n1", "sink": {"url": "ftp://fs"}})


def test_nccl_inspector_is_off_by_default_and_needs_its_directory_when_on() -> None:
    assert parse_config({"sink": SINK}).nccl_inspector.enabled is False
    with pytest.raises(ConfigError, match=r"nccl_inspector.*dir is required"):
        parse_config({"sink": SINK, "nccl_inspector": {"enabled": True}})
    cfg = parse_config({"sink": SINK, "nccl_inspector": {"enabled": True, "dir": "/var/log/nccl-inspector"}})
    assert cfg.nccl_inspector.files == ("*.log", "*/*.log") and cfg.nccl_inspector.job is None
