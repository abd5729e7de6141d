"""What the terminal shows (issue 16, item 5): `None` never, lines that fit the terminal, every
`--show` view working, unknown views refused before the run.

Real `probe` subprocesses on the bundled demo fleet and on every evidence fixture."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.facts import registry
from tests.support.evidence import EVIDENCE

ROOT = Path(__file__).resolve().parents[2]
NONE = re.compile(r"\bNone\b")


def probe(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=180)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("runs"))


def test_demo_with_every_view_prints_no_none(results: str) -> None:
    views = ",".join(registry.view_names())
    r = probe("run", "--results", results, "--show", views)
    assert r.returncode not in (2, 70), r.stderr
    assert "Traceback" not in r.stderr
    leaks = [ln for ln in (r.stdout + r.stderr).splitlines() if NONE.search(ln)]
    assert leaks == []
    for view in registry.view_names():
        assert f": {view}\n" in r.stdout  # each view rendered a block for the hosts


def test_a_view_without_its_section_says_why(results: str) -> None:
    r = probe("run", "--results", results, "-p", "quick", "-l", "ws-a6000-01,offline-01", "--show", "p2p,gpus")
    out = r.stdout
    assert "== ws-a6000-01: p2p\np2p not run on this host" in out
    assert re.search(r"== offline-01: gpus\nnvml unreachable: .*connection refused", out)


def test_gpus_view_names_the_host_and_fills_nvlink(results: str) -> None:
    r = probe("run", "--results", results, "-l", "dgx-h100-04", "--show", "gpus")
    lines = r.stdout.splitlines()
    head = lines.index("== dgx-h100-04: gpus") + 1
    assert lines[head].startswith("dgx-h100-04: 8 GPU(s)")
    rows = [ln for ln in lines[head + 3:head + 11]]
    nvl = [re.search(r"\s(\d+/\d+|\?)\s+(ok|failed: nvlink\.link\.down)\s*$", ln).groups()  # type: ignore[union-attr]
           for ln in rows]
    # the health column is the verdict's (issue 47 item 6): GPU2's 16 of 18 links are its nvlink.link.down
    assert nvl.count(("18/18", "ok")) == 7 and nvl.count(("16/18", "failed: nvlink.link.down")) == 1


@pytest.mark.parametrize("columns", [80, 200])
def test_demo_fits_the_terminal_width(tmp_path: Path, columns: int) -> None:
    # a fresh results directory: the drift text (its own layout, issue 16 part A) is not shown
    r = probe("run", "--results", str(tmp_path), "-v", columns=columns)  # the full report: the hosts table
    wide = [ln for ln in r.stdout.splitlines() if len(ln) > columns and not ln.startswith("run: ")]
    assert wide == []
    # wrapped, not cut: the unreachable host's advice is there in full
    flat = " ".join(r.stdout.split())
    assert "is sshd running there and is the port right (ansible_port)?" in flat
    assert "…" not in r.stdout.split("RECAP")[0].split("topology class")[0]  # no cell cut in the hosts table


def test_not_a_terminal_means_no_truncation(results: str) -> None:
    r = probe("run", "--results", results, "--hosts", "all")  # piped, a row per host
    assert "Red Hat Enterprise Linux 9.4 (Plow)" in r.stdout  # the os column was cut at 30 characters
    long_msgs = [ln for ln in r.stdout.splitlines() if "redirected through the root complex" in ln]
    assert long_msgs, "an ACS finding's message is shown whole on one line"


def test_unknown_view_is_refused_before_the_run_with_the_list(results: str) -> None:
    r = probe("run", "--results", results, "--show", "gpu")
    assert r.returncode == 2
    assert "unknown view 'gpu'" in r.stderr and "gpus" in r.stderr and "p2p" in r.stderr
    assert not list(Path(results).glob("*/fleet.json")) or "RECAP" not in r.stdout


@pytest.mark.parametrize("path", sorted(EVIDENCE.glob("*.txt")), ids=lambda p: p.stem)
def test_import_of_evidence_prints_no_none(tmp_path: Path, path: Path) -> None:
    views = ",".join(registry.view_names(importable_only=True))
    r = probe("import", str(path), "--results", str(tmp_path), "--show", views)
    assert "Traceback" not in r.stderr
    leaks = [ln for ln in (r.stdout + r.stderr).splitlines() if NONE.search(ln)]
    assert leaks == []
