"""`probe import` says each refused file's reason once (issue 48: a hand-pasted screen's reason was
printed four times: in the import's file list, the host table's `why`, the host's INCOMPLETE line
and the not-judged list).  The file list is the one place that says it (with the command to paste
for a half-readable file); the host's record names the files.  The class: a half-readable default
screen, `-q` and `-q -x` alone, an unreadable file alone, each beside a good file, and several
hosts in one `--fleet` directory; each with and without -v.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from tests.cli.test_import_half_readable import _query_heads, _screen_heads, _xml_cuts

TEXT = Path(__file__).resolve().parents[1] / "fixtures" / "text"
GOOD = ("L", (TEXT / "h200_real_L.txt").read_text())
JUNK = ("junk", "hello world\nnothing here\n")
SCREEN, QUERY, XML = _screen_heads()[0], _query_heads()[0], _xml_cuts()[0]


def _why(line: str) -> str:
    """A refused file's reason as the file list prints it, less its `FILE:LINE: ` head."""
    return re.sub(r"^\s*\S+?:(\d+:)? ", "", line).strip()


def _write(d: Path, texts: tuple[tuple[str, str], ...]) -> list[str]:
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (name, text) in enumerate(texts):
        p = d / f"f{i}.{re.sub(r'[^A-Za-z0-9_]', '_', name)[:40]}.txt"
        p.write_text(text)
        paths.append(str(p))
    return paths


def _reasons_once(out: str, refused: int, half: int) -> None:
    lines = [ln for ln in out.splitlines()
             if ln.startswith("  /") and ("half-readable" in ln or "not a recognised" in ln)]
    assert len(lines) == refused, out
    whys = Counter(_why(ln) for ln in lines)  # two junk files share their reason: once each
    for why, n in whys.items():
        assert out.count(why) == n, (why, out)
    assert len(re.findall(r"paste (the whole )?`nvidia-smi -q", out)) == half, out
    assert "None" not in out and "Traceback" not in out


CASES = {
    "screen": ((SCREEN,), 1, 1), "q": ((QUERY,), 1, 1), "q_x": ((XML,), 1, 1), "junk": ((JUNK,), 1, 0),
    "screen+good": ((SCREEN, GOOD), 1, 1), "q_x+good": ((XML, GOOD), 1, 1), "junk+good": ((JUNK, GOOD), 1, 0),
    "screen+junk": ((SCREEN, JUNK), 2, 1), "q+q_x": ((QUERY, XML), 2, 2),
}


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "v"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_refused_files_reason_is_said_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                case: str, verbose: bool) -> None:
    texts, refused, half = CASES[case]
    paths = _write(tmp_path / "in", texts)
    main(["import", *paths, "--results", str(tmp_path / "runs"), "--host", "h", *(["-v"] if verbose else [])])
    _reasons_once(capsys.readouterr().out, refused, half)


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "v"])
def test_several_hosts_in_one_fleet_directory_each_reason_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verbose: bool) -> None:
    fleet = tmp_path / "fleet"
    _write(fleet / "gpu01", (SCREEN,))
    _write(fleet / "gpu02", (XML, GOOD))
    _write(fleet / "gpu03", (JUNK,))
    _write(fleet / "gpu04", (QUERY, JUNK))
    main(["import", "--fleet", str(fleet), "--results", str(tmp_path / "runs"), *(["-v"] if verbose else [])])
    out = capsys.readouterr().out
    _reasons_once(out, 5, 3)
    # the failed hosts' rows still name their files and say which kind of trouble each had
    assert re.search(r"gpu01.*f0\.\S+\.txt \(half-readable\)", out), out
    assert re.search(r"gpu03.*f0\.junk\.txt \(unreadable\)", out), out
