from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fabricscope.collectors.switch.inventory import load_inventory, parse_inventory
from fabricscope.core.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[2] / "collectors" / "switch" / "inventory.example.yaml"


def _dev(**over):
    d = {"name": "leaf1", "address": "127.0.0.1", "protocols": ["snmp"],
         "snmp": {"community": {"env": "FS_TEST_COMMUNITY"}}}  # fmt: skip
    d.update(over)
    return {"devices": [d]}


@pytest.fixture(autouse=True)
def _secrets(monkeypatch, tmp_path):
    monkeypatch.setenv("FS_TEST_COMMUNITY", "s3cret-community")
    for var in ("LEAF_SNMP_AUTH", "SNMP_COMMUNITY", "SPINE_GNMI_PASSWORD", "BORDER_NETCONF_PASSWORD"):
        monkeypatch.setenv(var, "s3cret-" + var)


def test_example_inventory_validates(monkeypatch, tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    priv = tmp_path / "priv"
    priv.write_text("s3cret-priv\n")
    data["devices"][0]["snmp"]["v3"]["priv_key"] = {"file": str(priv)}
    inv = parse_inventory(data)
    leaf1 = inv.devices[0]
    assert leaf1.wants("Ethernet12") and not leaf1.wants("Management1") and not leaf1.wants("Vlan1")
    assert leaf1.secret(leaf1.snmp.v3.priv_key).get_secret_value() == "s3cret-priv"
    assert "s3cret" not in repr(inv) and "s3cret" not in str(leaf1.secret(leaf1.snmp.v3.priv_key))


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"snmp": {"port": 70000, "community": {"env": "FS_TEST_COMMUNITY"}}}, "devices[0].snmp.port"),
        ({"snmp": {"community": "public"}}, "devices[0].snmp.community"),  # inline secret refused
        ({"snmp": {"community": {"env": "FS_NOT_SET"}}}, "devices[0].snmp.community"),
        ({"protocols": ["gnmi"]}, "devices[0]"),
        ({"interval": 5, "timeout": 5}, "devices[0]"),
        ({"name": "bad name!"}, "devices[0].name"),
        ({"snmp": {"version": "3"}}, "devices[0].snmp"),
        ({"protocols": ["telnet"]}, "devices[0].protocols[0]"),
    ],
)
def test_errors_name_the_field_and_never_the_secret(over, field):
    with pytest.raises(ConfigError) as err:
        parse_inventory(_dev(**over))
    assert field in str(err.value)
    assert "public" not in str(err.value) and "s3cret" not in str(err.value)


def test_duplicate_names_and_unreadable_files(tmp_path):
    data = _dev()
    data["devices"].append(dict(data["devices"][0]))
    with pytest.raises(ConfigError, match=r"devices\[1\]\.name"):
        parse_inventory(data)
    with pytest.raises(ConfigError, match="cannot read"):
        load_inventory(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("devices: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_inventory(tmp_path / "bad.yaml")


def test_collect_command_reports_config_errors(tmp_path):
    import typer
    from typer.testing import CliRunner

    from fabricscope.collectors.switch.cli import collect_command

    app = typer.Typer()
    app.command()(collect_command)
    bad = tmp_path / "inv.yaml"
    bad.write_text(yaml.safe_dump(_dev(snmp={"community": "public"})))
    r = CliRunner().invoke(app, ["--inventory", str(bad), "--url", "http://127.0.0.1:9"])
    assert r.exit_code == 2 and "devices[0].snmp.community" in r.output and "public" not in r.output
    r = CliRunner().invoke(app, ["--inventory", str(bad), "--shard", "5/4"])
    assert r.exit_code == 2 and "shard" in r.output
