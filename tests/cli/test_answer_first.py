"""The answer first, in one screen (issue 49, item 1), as an operator sees it: real `probe`
subprocesses on a real pseudo-terminal (util-linux `script`) of 120 columns.

The demo's default `probe run` fits 80 lines with RECAP in the first 5 and every fault of the run
on a line with its host; a stored 10,000-host run with 10 planted faults (tests/support/
planted_fleet.py) fits 100 through `probe show`; `-v` and `--hosts all` keep a row per host, and
piped under `--hosts all` each host is one line that grep finds."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.api.stored import load_result
from orchestrator.store.compact import read_plain
from orchestrator.store.fleet_file import write_fleet
from orchestrator.verdict.result import FleetResult
from tests.support.planted_fleet import planted_fleet

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = 120
_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_tty(*args: str, columns: int = COLUMNS) -> list[str]:
    """The lines `probe ARGS` writes to a pseudo-terminal of `columns` columns (stdout and stderr,
    as the operator sees them; the progress line, rewritten in place, is one line)."""
    script = shutil.which("script")
    assert script, "util-linux `script` is needed to give probe a real terminal"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["PYTHONPATH"] = str(ROOT)
    inner = f"stty cols {columns} rows 50; " + shlex.join([sys.executable, "-m", "orchestrator", *args])
    done = subprocess.run([script, "-qec", inner, "/dev/null"], capture_output=True, env=env, cwd=ROOT,
                          timeout=300)  # bytes: text mode would read each `\r` of the progress line as a line
    lines = done.stdout.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [_CODES.sub("", ln).split("\r")[-1] for ln in lines]


def piped(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def _run_dir(lines: list[str]) -> Path:
    found = [ln.split("run: ", 1)[1].strip() for ln in lines if ln.startswith("run: ")]
    assert found, "\n".join(lines[-5:])
    return Path(found[-1])


def assert_every_fault_shown(fleet: FleetResult, lines: list[str]) -> None:
    """Each warn/fail fault: a line with its host and its root id; each info fault: its id and
    host in the text (the notes line)."""
    text = "\n".join(lines)
    for fault in fleet.faults():
        if fault.severity.value == "info":
            assert fault.root.id in text and fault.host in text, (fault.host, fault.root.id)
            continue
        on_line = [ln for ln in lines if fault.root.id in ln]
        # a host's second fault is on the line after its first (`  + id ...`)
        assert on_line, (fault.host, fault.root.id)
        assert any(fault.host in ln or ln.startswith("  + ") for ln in on_line), (fault.host, fault.root.id)
    for fabric in fleet.fabric_faults:
        if fabric.severity.value != "info":
            assert fabric.id in text


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], FleetResult]:
    results = tmp_path_factory.mktemp("runs")
    lines = on_tty("run", "--results", str(results))
    return lines, load_result(_run_dir(lines))


def test_the_demo_answers_in_one_screen_recap_first(demo: tuple[list[str], FleetResult]) -> None:
    lines, fleet = demo
    assert len(lines) <= 80, f"{len(lines)} lines"
    assert any(ln.startswith("RECAP hosts=48 ") for ln in lines[:5]), lines[:5]
    assert all(len(ln) <= COLUMNS for ln in lines)
    # the per-class verdict comes before the hosts, each class once with its hosts by health
    recap = next(i for i, ln in enumerate(lines) if ln.startswith("RECAP"))
    classes = next(i for i, ln in enumerate(lines) if ln.startswith("Classes ("))
    unhealthy = next(i for i, ln in enumerate(lines) if ln.startswith("Unhealthy hosts ("))
    assert recap < classes < unhealthy
    assert re.search(r"^  8xH100-SXM-NV18-8NIC-PIX +27 hosts: \d+ healthy, \d+ failed, \d+ degraded$",
                     "\n".join(lines), re.M)
    assert_every_fault_shown(fleet, lines)


def test_healthy_hosts_fold_into_their_class(demo: tuple[list[str], FleetResult]) -> None:
    lines, fleet = demo
    text = "\n".join(lines)
    healthy = [h.name for h in fleet.hosts if h.health.state.value == "healthy"
               and not any(f.host == h.name for f in fleet.faults())]
    assert len(healthy) >= 10
    for name in healthy:
        assert not re.search(rf"\b{re.escape(name)}\b", text), name


def test_what_was_not_judged_is_one_counted_line(demo: tuple[list[str], FleetResult]) -> None:
    lines, _ = demo
    at = [i for i, ln in enumerate(lines) if ln.startswith("Not judged")]
    assert len(at) == 1
    block = lines[at[0]] + " " + " ".join(ln.strip() for ln in lines[at[0] + 1:at[0] + 3] if ln.startswith("  "))
    assert re.search(r"[\d,]+ check x host pairs \([\d,]+ probe not in this run, [\d,]+ no expectation set", block)
    assert "-v lists them" in block
    assert not any("p2p probe not in this run" in ln for ln in lines)  # the reasons are counted, not listed


def test_verbose_and_hosts_all_keep_a_row_per_host(demo: tuple[list[str], FleetResult]) -> None:
    lines, fleet = demo
    run = str(_run_dir(lines))
    verbose = "\n".join(on_tty("show", run, "-v"))
    for h in fleet.hosts:
        assert re.search(rf"^{re.escape(h.name)}\s", verbose, re.M), h.name
    out = piped("show", run, "--hosts", "all").stdout
    for h in fleet.hosts:  # grep HOST: its row, one line, its health on it
        rows = [ln for ln in out.splitlines() if ln.split(" ", 1)[0] == h.name]
        assert len(rows) == 1 and h.health.state.value in rows[0].split(), (h.name, rows)


@pytest.mark.slow
def test_10000_hosts_with_10_faults_fit_100_lines(demo: tuple[list[str], FleetResult], tmp_path: Path) -> None:
    lines, _ = demo
    source = _run_dir(lines)
    run = tmp_path / "planted"
    run.mkdir()
    shutil.copy(source / "run.json", run / "run.json")
    write_fleet(run / "fleet.json", planted_fleet(read_plain(source / "fleet.json"), 10_000, 10))
    shown = on_tty("show", str(run))
    assert len(shown) <= 100, f"{len(shown)} lines"
    assert any(ln.startswith("RECAP hosts=10000 ") for ln in shown[:5]), shown[:5]
    fleet = load_result(run)
    assert len(fleet.problem_hosts) == 10
    assert_every_fault_shown(fleet, shown)
    assert not any(re.search(r"\bnode\d{5}\b", ln) for ln in shown)  # the healthy copies fold away
