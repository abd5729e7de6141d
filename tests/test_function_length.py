"""A function a reader can hold in their head (issue 46): none over 80 lines in the judging,
normalizing, transport and engine code, none over 100 anywhere in orchestrator/.

Length is the `def`'s span as ast gives it (`end_lineno - lineno + 1`), docstring included, so a
long docstring counts: past the limit, look for the two functions inside.  A pure ast walk: no
module of the package is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "orchestrator"
# The strict limit holds where the code is read most: the checks, the normalizers, the transports
# and the engine; everything else in orchestrator/ gets the looser one.
STRICT_DIRS = ("verdict", "facts/normalize", "transport", "engine")
STRICT_LIMIT = 80
LIMIT = 100


def _limit(rel: Path) -> int:
    posix = rel.as_posix()
    return STRICT_LIMIT if any(posix.startswith(f"orchestrator/{d}/") for d in STRICT_DIRS) else LIMIT


def _too_long(path: Path, rel: Path) -> list[str]:
    """`path:name (N lines)` for each function in one file over the limit for its directory."""
    limit = _limit(rel)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                out.append(f"{rel.as_posix()}:{node.name} ({length} lines)")
    return out


def _offenders(root: Path) -> list[str]:
    return [hit for path in sorted((root / "orchestrator").rglob("*.py"))
            for hit in _too_long(path, path.relative_to(root))]


def test_no_function_is_too_long() -> None:
    bad = _offenders(ROOT)
    assert not bad, (f"functions over {STRICT_LIMIT} lines in {', '.join(STRICT_DIRS)} or over {LIMIT} "
                     "elsewhere in orchestrator/; split each into named steps:\n" + "\n".join(bad))


def _planted(tmp_path: Path, rel: str, body_lines: int) -> None:
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    body = [f"x{i} = {i}\n" for i in range(body_lines - 1)]
    path.write_text("def f():\n" + "".join("    " + b for b in body) + "\n\nclass C:\n    async def g(self):\n"
                    + "".join("        " + b for b in body))


def test_the_census_sees_a_long_function(tmp_path: Path) -> None:
    # 81 lines: over the strict limit in each strict directory, within the loose one elsewhere
    for d in STRICT_DIRS:
        _planted(tmp_path, f"orchestrator/{d}/bad.py", 81)
    _planted(tmp_path, "orchestrator/present/fine.py", 81)
    _planted(tmp_path, "orchestrator/cli/bad.py", 101)
    assert sorted(_offenders(tmp_path)) == sorted(
        [f"orchestrator/{d}/bad.py:{n} (81 lines)" for d in STRICT_DIRS for n in ("f", "g")]
        + ["orchestrator/cli/bad.py:f (101 lines)", "orchestrator/cli/bad.py:g (101 lines)"])


def test_the_census_passes_a_function_at_the_limit(tmp_path: Path) -> None:
    _planted(tmp_path, "orchestrator/verdict/ok.py", STRICT_LIMIT)
    _planted(tmp_path, "orchestrator/api/ok.py", LIMIT)
    assert _offenders(tmp_path) == []
