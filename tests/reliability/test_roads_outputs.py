"""The output roads (docs/reliability.md "Roads out"): files a user names for --prometheus,
--junit, --html, --csv, --slurm-drain, `probe report -o` and `probe bundle -o`.  A device or FIFO
is written through and never replaced, a link stays a link, what cannot be written is exit 73
with one line naming it; generated scripts and tables stay one record per host whatever the
host is called; the terminal's encoding never fails a command."""

from __future__ import annotations

import csv
import io
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.present.outputs.slurm_drain import DRAIN_GUARD, render_drain
from orchestrator.present.outputs.tabular import render_hosts
from orchestrator.verdict.remedy import drain_plan
from orchestrator.verdict.result import FleetResult
from tests.support.hostile import cli_env, inventory, run_cli

IS_ROOT = os.geteuid() == 0


def _demo(tmp_path: Path, *outputs: str, **kw: Any) -> Any:
    return run_cli(["run", "--results", str(tmp_path / "results"), "-q", *outputs], timeout=300, **kw)


def _char_device(tmp_path: Path) -> Path:
    """A character device to write to: a null device of our own where we may make one (root), else
    /dev/null itself (which an unprivileged run could not replace anyway)."""
    if IS_ROOT:
        path = tmp_path / "null"
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        return path
    return Path("/dev/null")


def test_an_output_to_a_character_device_is_written_through(tmp_path: Path) -> None:
    dev = _char_device(tmp_path)
    got = _demo(tmp_path, "--prometheus", str(dev), "--junit", str(dev), "--html", str(dev))
    assert got.code == 5, got.stderr
    assert stat.S_ISCHR(os.stat(dev).st_mode), "the device node was replaced by a file"
    assert not list(dev.parent.glob(f".{dev.name}.*")), "a temp file was left beside the device"


def test_an_output_through_a_link_keeps_the_link_and_writes_its_target(tmp_path: Path) -> None:
    collector = tmp_path / "collector"
    collector.mkdir()
    target = collector / "fleetprobe.prom"
    target.write_text("# old\n")
    link = tmp_path / "fleet.prom"
    link.symlink_to(target)
    got = _demo(tmp_path, "--prometheus", str(link))
    assert got.code == 5, got.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "fleetprobe_host_health" in target.read_text()


def test_an_output_through_a_dangling_link_creates_its_target(tmp_path: Path) -> None:
    target = tmp_path / "made" / "junit.xml"
    target.parent.mkdir()
    link = tmp_path / "junit.xml"
    link.symlink_to(target)
    got = _demo(tmp_path, "--junit", str(link))
    assert got.code == 5, got.stderr
    assert link.is_symlink() and target.read_text().startswith("<?xml")


def test_an_output_to_a_fifo_is_written_to_its_reader(tmp_path: Path) -> None:
    fifo = tmp_path / "junit.fifo"
    os.mkfifo(fifo)
    got_text: list[str] = []
    reader = threading.Thread(target=lambda: got_text.append(fifo.read_text()))
    reader.start()
    got = _demo(tmp_path, "--junit", str(fifo))
    reader.join(timeout=60)
    assert got.code == 5, got.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got_text and got_text[0].startswith("<?xml")


def test_an_output_to_a_fifo_nobody_reads_is_73_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "fleet.prom"
    os.mkfifo(fifo)
    got = _demo(tmp_path, "--prometheus", str(fifo), "--junit", str(tmp_path / "junit.xml"))
    assert got.code == 73, got.stderr
    assert "fleet.prom" in got.stderr and "nobody reads" in got.stderr
    assert (tmp_path / "junit.xml").is_file(), "the other outputs are still written"


@pytest.mark.parametrize("kind", ["directory", "socket"] + (["block device"] if IS_ROOT else []))
def test_an_output_that_cannot_hold_a_file_is_refused_with_73(tmp_path: Path, kind: str) -> None:
    import socket

    path = tmp_path / "out"
    if kind == "directory":
        path.mkdir()
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    else:
        os.mknod(path, stat.S_IFBLK | 0o600, os.makedev(7, 0))  # a loop device's numbers: never opened
    got = _demo(tmp_path, "--prometheus", str(path))
    assert got.code == 73, got.stderr
    assert str(path) in got.stderr and kind.split()[-1] in got.stderr
    assert os.path.lexists(path) and not path.is_file(), "the node was replaced"


# ------------------------------------------------------------------------------ one record per host


def _fleet_of(names: list[str]) -> FleetResult:
    hosts = [{"name": n, "address": n, "groups": ["all"], "outcome": "ok", "reason": "", "probes": {}, "facts": {}}
             for n in names]
    findings = [{"id": "gpu.lost", "severity": "fail", "kind": "fault", "host": n, "subject": "GPU0",
                 "message": "lost"} for n in names]
    return FleetResult.from_document({"run": {"id": "r1"}, "hosts": hosts, "findings": findings})


HOSTILE_NAMES = ["node07\n", "node08\nscontrol update NodeName=all State=DOWN", "node09\r", "node10;reboot",
                 "node11 State=DOWN", "$(reboot)", "node12\u2028x", "-node13", "node\x0014"]


def test_the_drain_script_is_one_drain_line_per_host_whatever_its_name(tmp_path: Path) -> None:
    fleet = _fleet_of(["node01", *HOSTILE_NAMES])
    text = render_drain(fleet, drain_plan(fleet, force=True))  # every host fails: past the blast-radius guard
    guard = DRAIN_GUARD.splitlines()  # the shell function each line goes through (issue 47)
    commands = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#") and ln not in guard]
    assert commands == ['unless_foreign_reason scontrol update NodeName=node01 State=DRAIN Reason="fleetprobe r1: gpu.lost"']
    assert len([ln for ln in text.splitlines() if ln.startswith("# not a Slurm node name")]) == len(HOSTILE_NAMES)
    for line in text.splitlines():
        assert line.isprintable(), repr(line)


def test_a_stored_run_id_never_reaches_the_drain_script_unquoted() -> None:
    fleet = _fleet_of(["node01"])
    fleet.run.id = "r1\nreboot"
    lines = render_drain(fleet, drain_plan(fleet, force=True)).splitlines()
    guard = DRAIN_GUARD.splitlines()
    assert all(ln.startswith(("#", "unless_foreign_reason scontrol update NodeName=node01 ")) or ln in guard
               for ln in lines), lines


def test_the_hosts_csv_is_one_record_per_host_for_every_reader() -> None:
    names = ["node01", *HOSTILE_NAMES]
    text = render_hosts(_fleet_of(names), "csv")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert len(rows) == 1 + len(names)
    # a reader that splits lines first (Python's str.splitlines, many ad-hoc scripts) agrees
    assert len(list(csv.reader(text.splitlines()))) == 1 + len(names)


# ------------------------------------------------------------------------------ the terminal's encoding


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_cannot_print_a_name_never_fails_the_command(tmp_path: Path, encoding: str) -> None:
    inv = inventory(tmp_path / "inv.yml", {"gpü-01": {}, "节点-02": {}, "node03": {}})
    env = cli_env(PYTHONIOENCODING=encoding, LANG="C", LC_ALL="C")
    hosts = run_cli(["hosts", "-i", str(inv)], env=env, timeout=120)
    assert hosts.code == 0, hosts.stderr
    assert "node03" in hosts.stdout and "\\u70b9" in hosts.stdout  # said as an escape, never dropped
    run = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(tmp_path / "r")], env=env, timeout=300)
    assert run.code in (0, 1, 4, 5), run.stderr
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr
