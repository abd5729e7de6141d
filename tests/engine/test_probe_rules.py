"""Every shipped probe is one stdlib-only file that a Python 3.6 host can run."""

from __future__ import annotations

import ast
import sys
import sysconfig
from pathlib import Path

import pytest

from orchestrator.engine import payload as probes

PROBE_FILES = sorted(probes.probes_dir().glob("*.py"))


def _stdlib_names() -> set[str]:
    listed = getattr(sys, "stdlib_module_names", None)
    if listed is not None:
        return set(listed)
    # Python 3.9 keeps no list: the interpreter's own library directory is the standard library
    names = set(sys.builtin_module_names)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for entry in [*stdlib.iterdir(), *(stdlib / "lib-dynload").glob("*")]:
        if entry.name == "site-packages":
            continue
        if entry.suffix in (".py", ".so") or (entry / "__init__.py").is_file():
            names.add(entry.name.split(".")[0])
    return names


STDLIB = _stdlib_names()


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add("." * node.level)
            elif node.module:
                names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", PROBE_FILES, ids=lambda p: p.name)
def test_probe_imports_only_stdlib(path: Path) -> None:
    tree = ast.parse(path.read_text())
    bad = sorted(n for n in _imports(tree) if n not in STDLIB)
    assert not bad, f"{path.name} imports non-stdlib modules: {bad}"


@pytest.mark.parametrize("path", PROBE_FILES, ids=lambda p: p.name)
def test_probe_parses_as_python36(path: Path) -> None:
    tree = ast.parse(path.read_text(), feature_version=(3, 6))
    for node in ast.walk(tree):
        # Syntax newer than 3.6 that feature_version does not reject on its own.
        assert not isinstance(node, ast.NamedExpr), f"{path.name}: walrus operator needs 3.8"
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            assert all(a.name != "annotations" for a in node.names), f"{path.name}: __future__ annotations needs 3.7"
    src = path.read_text()
    for banned in ("import dataclasses", "from dataclasses", "breakpoint(", "asyncio.run("):
        assert banned not in src, f"{path.name} uses {banned!r}, not available on Python 3.6"


def test_every_probe_declares_its_contract() -> None:
    cat = probes.catalog()
    assert "host" in cat
    for spec in cat.values():
        assert spec.version and spec.description
        for lib in spec.requires:
            assert (probes.probes_dir() / f"{lib}.py").is_file(), f"{spec.name} requires missing {lib}"


def test_build_script_embeds_arguments_as_data_not_code() -> None:
    hostile = {"root": "'); import os; os.system('touch /tmp/pwned'); ('"}
    script = probes.build_script("host", hostile, 5.0).decode()
    last = script.rstrip().splitlines()[-1]
    assert last.startswith("fp_main(PROBE_NAME, PROBE_VERSION, collect, json.loads(")
    # The payload is inside one string literal that json.loads reads back unchanged.
    call = ast.parse(last).body[0].value  # type: ignore[attr-defined]
    literal = call.args[3].args[0].value
    import json

    assert json.loads(literal) == hostile
