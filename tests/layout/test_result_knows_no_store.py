"""The judged fleet knows no store (issue 46): verdict/result.py and the record interface it reads
through (files/records.py) import nothing of how runs are read or records kept (store.history,
rundir, spool, fleet_file, ...), lazy and type-only imports included, and no module of verdict/
asks whether its records are the spool's.  A stored run becomes a FleetResult in api/stored.py.

The one store module they may name is store.runmeta: run.json's typed value (RunMeta), the run a
result describes, which reads no file."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.layout.test_layers import PACKAGE, ROOT, _imports

KNOW_NO_STORE = (PACKAGE / "verdict" / "result.py", PACKAGE / "files" / "records.py")
ALLOWED = ("orchestrator.store.runmeta",)
STORE_TYPES = ("SpooledRecords",)


def _store_imports(path: Path) -> list[str]:
    return [f"{path.name}:{line}: imports {target}" for line, target in _imports(path)
            if (target == "orchestrator.store" or target.startswith("orchestrator.store."))
            and not any(target == a or target.startswith(a + ".") for a in ALLOWED)]


def _asks_for_store_type(path: Path) -> list[str]:
    """isinstance/issubclass calls naming a store record type (SpooledRecords, spool.SpooledRecords)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("isinstance", "issubclass") and len(node.args) == 2:
            named = {n.id for n in ast.walk(node.args[1]) if isinstance(n, ast.Name)} | \
                    {n.attr for n in ast.walk(node.args[1]) if isinstance(n, ast.Attribute)}
            out.extend(f"{path.name}:{node.lineno}: asks isinstance(..., {t})" for t in STORE_TYPES if t in named)
    return out


def test_the_result_and_its_record_interface_import_nothing_of_the_store() -> None:
    bad = [hit for path in KNOW_NO_STORE for hit in _store_imports(path)]
    assert not bad, "\n".join(bad)


def test_no_verdict_module_asks_whether_its_records_are_spooled() -> None:
    bad = [f"{p.relative_to(ROOT)}: {hit}" for p in sorted((PACKAGE / "verdict").rglob("*.py"))
           for hit in _asks_for_store_type(p)]
    assert not bad, "\n".join(bad)


def test_the_rules_see_a_store_import_and_a_spool_question(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from orchestrator.store.history import load_fleet\nimport orchestrator.store.spool\n"
                   "from orchestrator.store import rundir\nfrom orchestrator.store.runmeta import RunMeta\n"
                   "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from orchestrator.store.spool import Body\n"
                   "def f(r):\n    from orchestrator.store.fleet_file import read_fleet\n"
                   "    return isinstance(r, SpooledRecords) or isinstance(r, (list, spool.SpooledRecords))\n"
                   "isinstance(r, list)\n")
    assert [h.split(": imports ")[1] for h in _store_imports(bad)] == [
        "orchestrator.store.history", "orchestrator.store.history.load_fleet", "orchestrator.store.spool",
        "orchestrator.store", "orchestrator.store.rundir", "orchestrator.store.spool",
        "orchestrator.store.spool.Body", "orchestrator.store.fleet_file", "orchestrator.store.fleet_file.read_fleet"]
    assert [h.split(":")[1] for h in _asks_for_store_type(bad)] == ["10", "10"]
