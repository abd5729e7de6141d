"""Colour and columns on a real terminal (issue 49, item 3): health and severity coloured on a tty
(failed red, degraded yellow, healthy green, not judged dim), never when piped, NO_COLOR and
`--color auto|always|never` honoured; the hosts table's `why` shown on a terminal wide enough,
kept before `time` and `outcome` (it never showed, even at 300 columns)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.hostile import cli_env, run_cli
from tests.support.tty import run_on_tty, screen

RED, YELLOW, GREEN, DIM = "\x1b[31m", "\x1b[33m", "\x1b[32m", "\x1b[2m"
_ANY_CODE = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo run, stored; each test shows it (`probe show`) the way it needs."""
    results = tmp_path_factory.mktemp("colour") / "runs"
    r = run_cli(["run", "--results", str(results), "-q"], timeout=300)
    assert r.code in (1, 5), r.stderr
    return results


def _row(lines: list[str], host: str) -> str:
    return next(ln for ln in lines if ln.startswith(host + " "))


def test_a_terminal_gets_health_and_severity_in_colour(demo_run: Path) -> None:
    r = run_on_tty(["show", "--results", str(demo_run), "-v"])  # the full report: a row per host
    assert r.code == 0, r.raw[-2000:]
    raw_lines = r.raw.replace("\r\n", "\n").split("\n")
    for host, state, colour in [("dgx-h100-04", "failed", RED), ("dgx-h100-11", "degraded", YELLOW),
                                ("dgx-h100-01", "healthy", GREEN), ("offline-01", "unreachable", "\x1b[1;31m")]:
        row = _row(raw_lines, host)
        assert f"{colour}{state}\x1b[0m" in row, row
    assert re.search(rf"^{re.escape(RED)}FAILED\x1b\[0m dgx-h100-04", r.raw, re.M)
    assert re.search(rf"^  {re.escape(RED)}FAIL\x1b\[0m nvlink\.link\.down", r.raw, re.M)
    assert re.search(rf"-> {re.escape(YELLOW)}warn\x1b\[0m topology\.class\.outlier", r.raw)
    assert f"{DIM}Not judged" in r.raw
    recap = next(ln for ln in raw_lines if "RECAP" in ln)
    assert f"{RED}failed=" in recap and f"{GREEN}healthy=" in recap
    # the colour takes no column: what the terminal shows is the piped text, laid out the same
    piped = run_cli(["show", "--results", str(demo_run), "-v"], env=cli_env(COLUMNS="120"))
    assert [ln.rstrip() for ln in r.lines] == [ln.rstrip() for ln in piped.stdout.splitlines()]


@pytest.mark.parametrize("argv, env", [
    (["--color", "never"], {}),
    (["--colour", "never"], {}),
    ([], {"NO_COLOR": "1"}),
    ([], {"TERM": "dumb"}),
    (["--color", "auto"], {"NO_COLOR": "yes"}),
])
def test_no_colour_on_a_terminal_when_asked(demo_run: Path, argv: list[str], env: dict[str, str]) -> None:
    r = run_on_tty(["show", "--results", str(demo_run), *argv], **env)
    assert r.code == 0 and "RECAP" in r.raw
    assert not _ANY_CODE.search(r.raw), _ANY_CODE.findall(r.raw)[:5]


@pytest.mark.parametrize("argv, env, coloured", [
    ([], {}, False),  # piped: off
    (["--color", "auto"], {"COLUMNS": "120"}, False),
    (["--color", "always"], {}, True),
    (["--color", "always"], {"NO_COLOR": "1"}, True),  # the command line wins over the environment
])
def test_piped_output_is_plain_unless_always(demo_run: Path, argv: list[str], env: dict[str, str],
                                             coloured: bool) -> None:
    r = run_cli(["show", "--results", str(demo_run), "--hosts", "all", *argv], env=cli_env(**env))
    assert r.code == 0 and "RECAP" in r.stdout
    assert bool(_ANY_CODE.search(r.stdout)) is coloured
    if coloured:  # piped and coloured: still one line per host, the health painted in place
        assert f"{RED}failed\x1b[0m" in _row(r.stdout.splitlines(), "dgx-h100-04")


@pytest.mark.parametrize("columns", [120, 160, 200, 300])
def test_why_is_shown_on_a_wide_terminal_before_time_and_outcome(demo_run: Path, columns: int) -> None:
    lines = run_on_tty(["show", "--results", str(demo_run), "-v", "--color", "never"], columns=columns).lines
    head = lines[0].split()
    assert head[:4] == ["host", "health", "fail", "warn"] and head[-1] == "why", lines[0]
    assert max(len(ln) for ln in lines) <= columns
    table = "\n".join(lines[:lines.index("")])
    for host, fault in [("dgx-h100-04", "nvlink.link.down"), ("dgx-h100-05", "gpu.count.pci_vs_nvml"),
                        ("rent-h100-01", "software.security.firmware")]:
        block = table.split(host, 1)[1].split("\n" + "dgx", 1)[0].split("\nrent-h100-02", 1)[0]
        assert fault in "".join(block.split()).replace("\n", ""), (host, block)
    assert "unreachable (below)" in table


@pytest.mark.parametrize("columns", [80, 100])
def test_a_narrow_terminal_drops_why_last(demo_run: Path, columns: int) -> None:
    lines = run_on_tty(["show", "--results", str(demo_run), "-v", "--color", "never"], columns=columns).lines
    head = lines[0].split()
    assert max(len(ln) for ln in lines[:lines.index("")]) <= columns  # the hosts table
    assert "why" not in head and "time" not in head and "outcome" not in head
    assert screen("a\rb\x1b[K\n") == ["b"]  # the terminal model the tests read through


def test_findings_by_check_colour_their_severity(demo_run: Path) -> None:
    r = run_on_tty(["show", "--results", str(demo_run), "--findings", "checks"])
    assert re.search(rf"^{re.escape(RED)}FAIL\x1b\[0m gpu\.count\.pci_vs_nvml \(fault\) on 2 host\(s\)", r.raw, re.M)
    assert re.search(rf"^{re.escape(YELLOW)}WARN\x1b\[0m \S+ \(", r.raw, re.M)
