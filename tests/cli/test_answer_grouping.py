"""Group what repeats (issue 49, item 2): one cause on many hosts is one line of the default
report, the hosts' names folded as a range or a count.

Unknown host keys come from a real `probe run` against a real sshd (strict policy, an empty
known_hosts): one ssh-keyscan command for them all.  Notes, a Ctrl-C's skipped hosts and a fabric
fault come from the demo run's own judged records copied under new names (the layer under test
reads judged records; tests/support/planted_fleet.py does the same at scale)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.run import render_fleet_text
from orchestrator.engine.outcomes import NOT_STARTED
from orchestrator.present.terminal.names import fold_names
from orchestrator.verdict import rules
from orchestrator.verdict.result import FleetResult
from tests.support.sshd import SshdServer
from tests.verdict.test_verdict_demo import demo_fleet

ROOT = Path(__file__).resolve().parents[2]
Record = dict[str, Any]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unknown_host_keys_are_one_ssh_keyscan_command(sshd: SshdServer, tmp_path: Path) -> None:
    closed = _closed_port()
    hosts = sshd.fleet(10) + [sshd.host(f"gone{i:02d}", ansible_port=closed) for i in range(1, 5)]
    inventory = tmp_path / "inv.yml"
    inventory.write_text(sshd.inventory_yaml(hosts, known_hosts=False))
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    r = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-i", str(inventory), "--probe", "host",
                        "--known-hosts", str(empty), "--ssh-config", str(sshd.ssh_config), "--retries", "0",
                        "--connect-timeout", "5", "--results", str(tmp_path / "runs")],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
    assert r.returncode not in (2, 70), r.stderr
    out = r.stdout
    assert out.count("ssh-keyscan") == 1, out
    command = re.search(r"`ssh-keyscan -p (\d+) ([^`>]+) >> ([^`]+)`", out.replace("\n    ", " "))
    assert command, out
    assert command[1] == str(sshd.port) and command[3] == str(empty)
    assert set(command[2].split()) == {h.vars["ansible_host"] for h in hosts[:10]}
    assert "node[01:10] (10 hosts): unknown host key" in out
    # the four closed ports: one line, names folded
    refused = [ln for ln in out.splitlines() if "gone" in ln]
    assert len(refused) == 1 and refused[0].startswith("UNREACHABLE gone[01:04] (4 hosts): "), out
    assert "connection refused" in out


# --- from the demo's judged records ----------------------------------------------------------


@pytest.fixture(scope="module")
def demo() -> dict[str, Any]:
    return demo_fleet()[1]


def _copies(doc: dict[str, Any], source: str, names: list[str],
            change: Callable[[Record], None] | None = None) -> tuple[list[Record], list[Record]]:
    """The demo host `source` under each of `names`, with its findings; `change` edits each copy."""
    record = next(h for h in doc["hosts"] if h["name"] == source)
    hosts, findings = [], []
    for name in names:
        rec = dict(record, name=name)
        if change:
            change(rec)
        hosts.append(rec)
        findings += [dict(f, host=name) for f in doc["findings"] if f["host"] == source]
    return hosts, findings


def _fleet(doc: dict[str, Any], hosts: list[Record], findings: list[Record]) -> FleetResult:
    return FleetResult.from_document({"schema_version": doc["schema_version"], "run": doc["run"], "hosts": hosts,
                                      "classes": [], "findings": findings, "silenced": [], "fabric_findings": []})


def _shown(fleet: FleetResult, monkeypatch: pytest.MonkeyPatch, columns: int = 120) -> list[str]:
    monkeypatch.setenv("COLUMNS", str(columns))
    return render_fleet_text(fleet, full=False).splitlines()


@pytest.mark.parametrize("names, folded", [
    ([f"vm{i:02d}" for i in range(1, 11)], "vm[01:10] (10 hosts)"),
    ([f"gpu-{i:03d}" for i in range(95, 105)], "gpu-[095:104] (10 hosts)"),
    ([f"vm{i:02d}" for i in range(1, 21, 2)], "10 hosts: vm01, vm03, vm05 (+7 more)"),
    (["alpha", "beta", "gamma", "delta"], "4 hosts: alpha, beta, gamma (+1 more)"),
])
def test_the_same_note_on_many_hosts_is_one_line(demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                  names: list[str], folded: str) -> None:
    fleet = _fleet(demo, *_copies(demo, "vm-a100-01", names))
    lines = _shown(fleet, monkeypatch, columns=300)
    notes = [ln for ln in lines if "host.virtualized" in ln]
    assert len(notes) == 1 and f"gpu.mig.enabled, host.virtualized on {folded}" in notes[0], lines
    assert sum(ln.count(names[1]) for ln in lines) <= 1  # each name once at most, never once per note


def _unwrapped(lines: list[str]) -> list[str]:
    """The report's lines with each wrapped line joined to the one it continues."""
    out: list[str] = []
    for ln in lines:
        if ln.startswith("    ") and out:
            out[-1] += " " + ln.strip()
        else:
            out.append(ln)
    return out


def _skipped(rec: Record) -> None:
    """A host the operator's Ctrl-C stopped before it started (engine/outcomes.py NOT_STARTED)."""
    rec["probes"] = {p: {"outcome": "skipped", "reason": NOT_STARTED} for p in rec["probes"]}
    rec.update(facts={}, outcome="skipped", reason=NOT_STARTED)
    rec.pop("health", None)
    rec.pop("not_judged", None)


@pytest.mark.parametrize("count", [2, 12, 200])
def test_hosts_a_ctrl_c_skipped_are_one_line(demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                             count: int) -> None:
    names = [f"cut{i:03d}" for i in range(count)]
    fleet = _fleet(demo, *_copies(demo, "dgx-h100-01", names, _skipped))
    lines = _unwrapped(_shown(fleet, monkeypatch))
    said = [ln for ln in lines if "run interrupted" in ln or "cut0" in ln or "cut[" in ln]
    assert len(said) == 1, lines
    assert said[0].startswith(f"INCOMPLETE {fold_names(names)}: ")
    assert said[0].count("run interrupted") == 1  # the probes' one reason, once


def test_a_fabric_fault_on_many_hosts_is_one_line(demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    names = [f"node{i:02d}" for i in range(1, 17)]
    hosts, _ = _copies(demo, "dgx-h100-01", names)
    rail = [{"id": rules.fabric.RAIL_SLOW.id, "severity": "fail", "kind": "fault", "host": n,
             "subject": "rail 6 (mlx5_6)", "message": "rail 6 runs at 180 Gb/s where the others run 390",
             "hint": "check the rail's switch and cables"} for n in names]
    fleet = _fleet(demo, hosts, rail)
    assert len(fleet.fabric_faults) == 1
    lines = _shown(fleet, monkeypatch)
    shown = [ln for ln in lines if rules.fabric.RAIL_SLOW.id in ln]
    assert len(shown) == 1 and "node[01:16] (16 hosts)" in shown[0], lines
    assert not any(ln.startswith(("FAILED", "DEGRADED")) for ln in lines)  # no host is failed for it


@pytest.mark.parametrize("names, text", [
    (["a"], "a"),
    (["n1", "n2", "n2", "n3"], "n1, n2, n3"),  # a name twice is one host
    (["node9", "node10", "node11", "node12"], "4 hosts: node9, node10, node11 (+1 more)"),  # widths differ
    (["r1n01", "r1n02", "r2n03", "r2n04"], "4 hosts: r1n01, r1n02, r2n03 (+1 more)"),  # prefixes differ
    (["x01", "x02", "x04", "x05"], "4 hosts: x01, x02, x04 (+1 more)"),  # a gap
    (["\x1b[31mred01", "\x1b[31mred02", "\x1b[31mred03", "\x1b[31mred04"], "red[01:04] (4 hosts)"),
])
def test_names_fold_as_a_range_only_where_they_are_one(names: list[str], text: str) -> None:
    assert fold_names(names) == text


@pytest.mark.parametrize("count", [31, 400])
def test_many_hosts_with_one_fault_stay_one_screen(demo: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                   count: int) -> None:
    """Past 30 hosts with faults the rest are one line per finding id, their names folded."""
    names = [f"bad{i:03d}" for i in range(count)]
    fleet = _fleet(demo, *_copies(demo, "dgx-h100-04", names))
    lines = _shown(fleet, monkeypatch)
    assert len(lines) <= 90, len(lines)
    rest = [ln for ln in lines if ln.startswith("FAIL nvlink.link.down on ")]
    assert len(rest) == 1 and rest[0].endswith(fold_names(names[30:])), lines
    assert f"{count - 30} more unhealthy host(s) with faults" in "\n".join(lines)
