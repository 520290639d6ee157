"""Packaging and layout (issue #14): one namespace, role extras, imports that run one way.

The wheel is built from this checkout and installed into a fresh virtual environment with the base
install only (no extras, no index): what a GPU node that only trains gets.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
# Every interpreter this module starts sees its own venv only: a PYTHONPATH naming a checkout (as in
# a worktree run) would make `collectors` importable, and pip would take the checkout as installed.
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
SERVER_LIBS = {"fastapi", "starlette", "uvicorn", "sqlalchemy", "alembic", "psycopg", "pandas", "pysnmp",
               "ncclient", "pygnmi", "grpc", "nats", "apscheduler"}


def imported_top_level(python: str, code: str, *args: str) -> set[str]:
    """Top-level names of the modules that ``code`` imports: what ``python -X importtime`` reports,
    less failed attempts (importtime lists those too: ``copy`` tries Jython's ``org.python.core``)
    and less what the interpreter's start-up imports (sitecustomize, .pth files)."""
    def names_of(source: str) -> set[str]:
        probe = f"{source}\nimport sys as _s; print('\\n'.join(_s.modules))"
        out = subprocess.run([python, "-X", "importtime", *args, "-c", probe], capture_output=True, text=True,
                             timeout=120, cwd="/", env=CLEAN_ENV)
        assert out.returncode == 0, out.stderr[-2000:]
        loaded = {name.split(".")[0] for name in out.stdout.split()}
        return loaded & {line.rsplit("|", 1)[1].strip().split(".")[0] for line in out.stderr.splitlines()
                         if line.startswith("import time:") and "|" in line and "imported package" not in line}

    return names_of(code) - names_of("pass")


def third_party(names: set[str]) -> set[str]:
    return {n for n in names if n not in sys.stdlib_module_names and n != "fabricscope" and not n.startswith("_")}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the checkout's files (setuptools writes build/ next to the sources)."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                           text=True, check=True, env=CLEAN_ENV).stdout.splitlines()
    for rel in files:
        path = REPO / rel
        if path.is_symlink() or path.is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).symlink_to(os.readlink(path)) if path.is_symlink() else shutil.copy2(path, src / rel)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                    str(src)], check=True, timeout=300, capture_output=True, env=CLEAN_ENV)
    (whl,) = out.glob("fabricscope-*.whl")
    return whl


@pytest.fixture(scope="module")
def base_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    env = tmp_path_factory.mktemp("base-venv")
    venv.create(env, with_pip=True)
    subprocess.run([env / "bin/python", "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
                   check=True, timeout=300, capture_output=True, env=CLEAN_ENV)
    yield env


@pytest.mark.slow
def test_wheel_installs_only_fabricscope_top_level(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    top = {n.split("/", 1)[0] for n in names}
    assert {t for t in top if not t.startswith("fabricscope")} == set(), top
    assert "fabricscope/collectors/host/agent.py" in names and "fabricscope/service/api/main.py" in names
    assert "fabricscope/migrations/env.py" in names and "fabricscope-legacy.pth" in top
    assert not any("/lab/" in n for n in names), "the lab is test equipment, not product"
    base_requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert base_requires == [], base_requires
    for extra in ("agent", "switch", "server", "all", "lab", "test"):
        assert f"Provides-Extra: {extra}" in meta


@pytest.mark.slow
def test_base_install_imports_the_hook_with_the_standard_library_only(base_env: Path) -> None:
    py = str(base_env / "bin/python")
    names = imported_top_level(py, "from fabricscope.training import Recorder; Recorder(enabled=False)")
    assert "threading" in names  # the hook's own imports were measured
    assert third_party(names) == set()


@pytest.mark.slow
def test_base_install_keeps_the_old_import_for_one_release(base_env: Path) -> None:
    py = str(base_env / "bin/python")
    old = subprocess.run([py, "-W", "always::DeprecationWarning", "-c",
                          "from collectors.training import Recorder; import fabricscope.training as t; "
                          "assert Recorder is t.Recorder"], capture_output=True, text=True, timeout=60, cwd="/",
                         env=CLEAN_ENV)
    assert old.returncode == 0, old.stderr
    assert "DeprecationWarning" in old.stderr and "fabricscope.training" in old.stderr
    assert "<string>" in old.stderr  # the warning names the script's line, not importlib's
    strict = subprocess.run([py, "-W", "error::DeprecationWarning", "-c", "import collectors.training"],
                            capture_output=True, text=True, timeout=60, cwd="/", env=CLEAN_ENV)
    assert strict.returncode != 0
    gone = subprocess.run([py, "-c", "import collectors.host"], capture_output=True, text=True, timeout=60, cwd="/",
                          env=CLEAN_ENV)
    assert gone.returncode != 0  # only the hook's old path is kept


@pytest.mark.slow
def test_base_install_command_line_says_which_extra(base_env: Path) -> None:
    r = subprocess.run([str(base_env / "bin/fabricscope"), "agent"], capture_output=True, text=True, timeout=60,
                       env=CLEAN_ENV)
    assert r.returncode == 2
    assert "pip install 'fabricscope[agent]'" in r.stderr and "Traceback" not in r.stderr


def test_a_missing_extra_is_a_one_line_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """With typer present but pysnmp absent, `collect` answers with the install line, not a traceback."""
    from typer.testing import CliRunner

    from fabricscope import cli

    real_load = cli.load

    def load_without_pysnmp(entry: cli.Entry) -> object:
        if entry.name == "collect":
            raise ModuleNotFoundError("No module named 'pysnmp'", name="pysnmp")
        return real_load(entry)

    monkeypatch.setattr(cli, "load", load_without_pysnmp)
    r = CliRunner().invoke(cli.build_app("collect"), ["collect", "--inventory", "x.yaml"])
    assert r.exit_code == 2
    assert "pip install 'fabricscope[switch]'" in r.output and "pysnmp" in r.output
    with pytest.raises(ModuleNotFoundError):  # a missing fabricscope module is a bug, never hidden as a hint
        monkeypatch.setattr(cli, "load", lambda e: (_ for _ in ()).throw(
            ModuleNotFoundError("x", name="fabricscope.gone")))
        cli.build_app("agent")


def test_agent_process_imports_no_server_library() -> None:
    """Even where every extra is installed (this environment), running the agent loads none of them."""
    names = imported_top_level(sys.executable, "from fabricscope.cli import main\n"
                                                "try:\n    main(['agent', '--help'])\nexcept SystemExit:\n    pass")
    assert "fabricscope" in names and "typer" in names
    assert names & SERVER_LIBS == set(), names & SERVER_LIBS


def _module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    component.append(m)
                    if m == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_module_import_cycles_and_collectors_never_import_the_server() -> None:
    graph = grimp.build_graph("fabricscope", cache_dir=None)
    assert _module_cycles(graph) == []
    for module in graph.modules:
        if module.startswith(("fabricscope.collectors", "fabricscope.core")):
            chain = graph.find_shortest_chain(importer=module, imported="fabricscope.service")
            assert chain is None, f"{' -> '.join(chain or [])}"


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = grimp.ImportGraph()
    for m in ("p.a", "p.b", "p.c"):
        graph.add_module(m)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert _module_cycles(graph) == []
    graph.add_import(importer="p.c", imported="p.a")
    assert _module_cycles(graph) == [["p.a", "p.b", "p.c"]]
