"""The ``fabricscope`` command: one entry point; each subcommand needs only its role's extra.

The base install (the training hook) has no command line. Each role's extra brings its commands:
``[agent]`` the host agent and the importers, ``[switch]`` the switch collectors, ``[server]`` the
API, database, simulator and demo. A subcommand whose extra is not installed is still listed, and
running it prints the one ``pip install`` line that brings it instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from typing import Any

INSTALL_HINT = "pip install 'fabricscope[{extra}]'"


@dataclass(frozen=True)
class Entry:
    name: str
    module: str
    attr: str
    extra: str
    help: str
    group: bool = False


ENTRIES = (
    Entry("serve", "fabricscope.service.cli", "serve", "server", "Run the HTTP API (migrating the database first)."),
    Entry("migrate", "fabricscope.service.cli", "migrate_cmd", "server", "Bring the database schema up to date."),
    Entry("db", "fabricscope.service.cli", "db_app", "server", "The database in use.", group=True),
    Entry("topology", "fabricscope.service.cli", "topology_app", "server", "Topology files.", group=True),
    Entry("demo", "fabricscope.service.demo", "demo_command", "server", "API + simulated cluster + slow steps."),
    Entry("simulate", "fabricscope.service.simulate.cli", "simulate_command", "server",
          "Send a simulated cluster with injected faults to an API."),
    Entry("compare", "fabricscope.service.fleet.cli", "compare_command", "server",
          "Why is run B slower than run A (phases, versions, placement, components)."),
    Entry("writer", "fabricscope.service.bus.cli", "writer_command", "server", "NATS bus writer."),
    Entry("agent", "fabricscope.collectors.host.agent", "agent_command", "agent",
          "The host agent (NIC, RDMA/IB, storage)."),
    Entry("collect", "fabricscope.collectors.switch.cli", "collect_command", "switch",
          "Poll the switches of an inventory."),
    Entry("parse", "fabricscope.collectors.formats.cli", "parse_command", "agent",
          "Print what fabricscope reads from a recorded device or tool output (no device, no database)."),
    Entry("import", "fabricscope.collectors.training.importers.cli", "import_app", "agent",
          "Import timings recorded by other tools.", group=True),
)


def missing_extra(exc: ModuleNotFoundError) -> bool:
    """A third-party module is absent (an extra is not installed), not a fabricscope bug."""
    return exc.name is not None and exc.name.split(".")[0] != "fabricscope"


def load(entry: Entry) -> Any:
    """The entry's Typer command or group; ModuleNotFoundError when its extra is not installed."""
    return getattr(importlib.import_module(entry.module), entry.attr)


def _hint_command(entry: Entry, missing: str | None) -> Any:
    import typer

    def needs_extra() -> None:
        typer.secho(f"fabricscope {entry.name} needs the '{entry.extra}' extra ({missing} is not installed): "
                    f"{INSTALL_HINT.format(extra=entry.extra)}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2)

    return needs_extra


def _listed_only() -> None:
    """Only listed (root help): main() loads a command's module when that command is the one run."""


def build_app(only: str | None = None) -> Any:
    """The Typer app. With ``only``, just that command's module is imported (an agent process loads
    no server code even where every extra is installed); the others are listed by name and help."""
    import typer

    app = typer.Typer(help="fabricscope: why was step N slow?", no_args_is_help=True, add_completion=False)
    for entry in ENTRIES:
        if only is not None and entry.name != only:
            app.command(entry.name, help=entry.help)(_listed_only)
            continue
        try:
            target = load(entry)
        except ModuleNotFoundError as exc:
            if not missing_extra(exc):
                raise
            app.command(entry.name, help=f"{entry.help} [needs fabricscope[{entry.extra}]]",
                        context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                          "help_option_names": []})(_hint_command(entry, exc.name))
            continue
        if entry.group:
            app.add_typer(target, name=entry.name, help=entry.help)
        else:
            app.command(entry.name)(target)
    return app


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    try:
        import typer  # noqa: F401  (every role extra brings it)
    except ModuleNotFoundError:
        roles = ", ".join(f"{INSTALL_HINT.format(extra=e)} ({what})" for e, what in
                          (("agent", "host agent"), ("switch", "switch collectors"), ("server", "API, demo")))
        print(f"fabricscope: the base install holds the training hook only; the command line comes with a role: "
              f"{roles}", file=sys.stderr)
        raise SystemExit(2) from None
    names = {e.name for e in ENTRIES}
    only = args[0] if args and args[0] in names else ""  # "": the root (help): list, import nothing
    build_app(only)(args=args, prog_name="fabricscope")


if __name__ == "__main__":  # pragma: no cover
    main()
