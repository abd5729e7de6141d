"""The package layout is the architecture: a module imports only from its own layer or below, and
every package is installed.

Layers, bottom to top (docs/architecture.md): inventory and facts know nothing of the rest;
transport moves bytes to hosts; engine runs probes over a transport; store owns the results
directory; verdict judges facts; present shows the verdict; api plans and runs a whole run;
cli is argparse around the api.  simulate builds fake hardware for tests and the demo.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.support.skips import not_here

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "orchestrator"
RANK = {"inventory": 0, "facts": 0, "files": 0, "transport": 1, "engine": 2, "store": 3, "verdict": 4, "present": 5,
        "api": 6, "simulate": 6, "cli": 7}
# Not layers: the version (`orchestrator/__init__.py`), `python -m orchestrator`, and data folders.
TOP_LEVEL_MODULES = {"__init__.py", "__main__.py"}
DATA_DIRS = {"demo", "schema"}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "orchestrator" else None


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
            out.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
        elif isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
    return [(line, m) for line, m in out if m.split(".")[0] == "orchestrator"]


def _modules() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("")
        out.append((path, ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)))
    return out


def test_every_module_sits_in_a_layer() -> None:
    stray = [p.name for p in PACKAGE.iterdir()
             if p.name not in TOP_LEVEL_MODULES and p.name not in DATA_DIRS and p.name not in RANK
             and p.name != "__pycache__"]
    assert not stray, f"orchestrator/ holds {stray}: put each in the layer it belongs to (docs/architecture.md)"


def test_no_import_points_up_a_layer() -> None:
    upward = []
    for path, module in _modules():
        me = _layer(module)
        if me not in RANK:
            continue
        for line, target in _imports(path):
            other = _layer(target)
            if other in RANK and RANK[other] > RANK[me]:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {me} imports {target} ({other} is above it)")
    assert not upward, "\n".join(sorted(set(upward)))


def test_the_layer_test_sees_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from orchestrator.cli.run import execute\nfrom orchestrator.facts import gpu_models\n")
    assert [m for _, m in _imports(bad) if RANK.get(_layer(m) or "", -1) > RANK["facts"]] == [
        "orchestrator.cli.run", "orchestrator.cli.run.execute"]


def test_every_package_is_installed() -> None:
    if sys.version_info < (3, 11):
        not_here("tomllib is Python 3.11+")
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {m for p, m in _modules() if p.name == "__init__.py"}
    assert found - listed == set(), "packages missing from pyproject.toml [tool.setuptools] packages"
    mapped = config["package-dir"]
    assert mapped == {"orchestrator.probes": "probes", "orchestrator.playbooks": "playbooks"}
    assert listed - found == set(mapped), "pyproject.toml lists packages that do not exist"


# Modules a presenter must not import, though they sit in a lower layer: the checks, drift and the
# spool are how the verdict decides; a presenter renders what it decided (verdict/result.py), it
# never decides again (no floors, link states, outcome orders or coverage of its own).
PRESENT_MAY_NOT_IMPORT = ("orchestrator.verdict.checks", "orchestrator.verdict.drift", "orchestrator.store.spool")


def _forbidden_in_present(path: Path) -> list[str]:
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}:{line}: imports {target}"
            for line, target in _imports(path)
            if any(target == m or target.startswith(m + ".") for m in PRESENT_MAY_NOT_IMPORT)]


def test_presenters_decide_nothing() -> None:
    bad = [hit for path in sorted((PACKAGE / "present").rglob("*.py")) for hit in _forbidden_in_present(path)]
    assert not bad, "\n".join(bad)


def test_the_presenter_rule_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from orchestrator.verdict.checks import p2p\nimport orchestrator.store.spool\n"
                   "def f():\n    from orchestrator.verdict.drift import diff_fleets\n"
                   "from orchestrator.verdict.result import FleetResult\n")
    assert [h.split(": imports ")[1] for h in _forbidden_in_present(bad)] == [
        "orchestrator.verdict.checks", "orchestrator.verdict.checks.p2p", "orchestrator.store.spool",
        "orchestrator.verdict.drift", "orchestrator.verdict.drift.diff_fleets"]
