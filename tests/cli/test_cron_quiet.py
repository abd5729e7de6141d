"""`-q`, the cron mode (issue 16, item 3; health first since issue 28): every host that is not
healthy with its health, its transport outcome where that is a problem, why, and its warn/fail
faults; on a healthy fleet nothing at all (so cron sends no mail); exit codes unchanged.
Real `probe run` invocations: the demo fleet's replayed hosts, local hosts whose interpreter
misbehaves, and a closed port."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.hostile import interpreter, inventory
from tests.support.sshd import SshdServer

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("COLUMNS", None)  # cron: no terminal, so nothing is wrapped
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=180)


def test_quiet_on_a_healthy_fleet_prints_nothing(tmp_path: Path) -> None:
    proc = probe("run", "-q", "-l", "dgx-h100-01,dgx-h100-02,dgx-a100-01", "--results", str(tmp_path / "runs"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    shown = probe("show", "-q", "--results", str(tmp_path / "runs"))
    assert (shown.returncode, shown.stdout) == (0, "")


def test_quiet_names_every_problem_host_and_every_warn_or_fail_finding(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    garbage = interpreter(bin_dir, "garbage", "sys.stdout.write('this is not an envelope')")
    crash = interpreter(bin_dir, "crash", "sys.stderr.write('Segmentation fault'); sys.exit(139)")
    inv = inventory(tmp_path / "inv.yml", {
        "dgx-h100-04": {"ansible_connection": "replay", "probe_replay": "dgx-h100-04",
                        "probe_expect": {"nvlink_all_up": True}},
        "dgx-h100-01": {"ansible_connection": "replay", "probe_replay": "dgx-h100-01"},
        "garbled01": {"ansible_python_interpreter": str(garbage)},
        "crashed01": {"ansible_python_interpreter": str(crash)},
        "offline01": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
    })
    proc = probe("run", "-q", "-i", str(inv), "--probe", "host", "--probe", "nvlink", "--retries", "0",
                 "--results", str(tmp_path / "runs"))
    assert proc.returncode == 5, proc.stderr  # fail findings and problem hosts, as without -q
    lines = proc.stdout.splitlines()
    unreachable = [ln for ln in lines if ln.startswith("UNREACHABLE offline01: ")]
    assert len(unreachable) == 1 and "connection refused" in unreachable[0]
    [garbled] = [ln for ln in lines if ln.startswith("INCOMPLETE garbled01 (transport invalid_output: ")]
    assert "host" in garbled and ": " in garbled
    [crashed] = [ln for ln in lines if " crashed01 " in f" {ln}"]
    assert crashed.split()[0] == "INCOMPLETE" and ("transport failed" in crashed or "transport invalid_output"
                                                   in crashed) and ": " in crashed
    assert any(ln.strip().startswith("FAIL nvlink.link.down") for ln in lines)  # beneath its host
    assert "dgx-h100-01" not in proc.stdout  # a healthy host is not mentioned
    assert "INFO" not in proc.stdout


def test_quiet_fits_a_terminal_and_keeps_lines_whole_for_cron(tmp_path: Path) -> None:
    """At a terminal of 80 columns -q wraps like the full report; under cron (no terminal, no
    COLUMNS) every reason stays on its one line."""
    args = ("run", "-q", "-l", "dgx-h100-04,offline-01", "--results", str(tmp_path / "runs"))
    narrow = probe(*args, columns=80)
    # the closing `run: PATH` line stays whole: a path is copied, not read
    body = [ln for ln in narrow.stdout.splitlines() if not ln.startswith("run: ")]
    assert narrow.returncode == 5 and max(len(ln) for ln in body) <= 80, narrow.stdout
    whole = probe(*args)
    [line] = [ln for ln in whole.stdout.splitlines() if ln.startswith("UNREACHABLE offline-01: ")]
    assert line.endswith("(ansible_port)? (after 2 retries)")
    joined = " ".join(narrow.stdout.split())
    assert " ".join(line.split()) in joined  # the same words, wrapped


def test_quiet_names_a_timed_out_host(tmp_path: Path, sshd: SshdServer) -> None:
    """Over SSH (the transport cron runs use), a probe that outlives -t is one TIMEOUT line."""
    hang = interpreter(tmp_path / "bin", "hang", "import time; time.sleep(60)")
    host = sshd.host("stuck01", ansible_python_interpreter=str(hang))
    inv = inventory(tmp_path / "inv.yml", {"stuck01": {"ansible_connection": "ssh", **host.vars},
                                           "dgx-h100-01": {"ansible_connection": "replay",
                                                           "probe_replay": "dgx-h100-01"}})
    proc = probe("run", "-q", "-i", str(inv), "--probe", "host", "-t", "3", "--results", str(tmp_path / "runs"),
                 "--ssh-config", str(sshd.ssh_config), "--known-hosts", str(sshd.known_hosts))
    assert proc.returncode == 4, proc.stderr
    [line] = [ln for ln in proc.stdout.splitlines() if "stuck01" in ln]
    assert line.startswith("INCOMPLETE stuck01 (transport timeout: host): ") and "3" in line
    assert "dgx-h100-01" not in proc.stdout
