"""What to do, guarded: `probe remediate` writes a playbook that the real `ansible-playbook
--syntax-check` accepts, grouped by action and host; the drain list and the remediation refuse a
30 % drain without --force and name the rules that would have drained the hosts."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.present.outputs.remediation import render_playbook
from orchestrator.verdict import remedy
from orchestrator.verdict.actions import Action
from orchestrator.verdict.findings import Severity
from tests.support.hostile_strings import ansible_yaml
from tests.support.judged import judged

ROOT = Path(__file__).resolve().parents[2]
HEALTHY = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-03", "dgx-h100-12", "dgx-a100-01", "dgx-a100-02", "lenovo-h100-01"]
# three failed hosts of ten: a link down (reboot), a GPU the driver lost (hands), a failed row remap (RMA)
FAILED = ["dgx-h100-04", "dgx-h100-05", "dgx-a100-04"]


def _ansible_playbook() -> str:
    beside = Path(sys.executable).parent / "ansible-playbook"
    found = str(beside) if beside.is_file() else shutil.which("ansible-playbook")
    if found:
        return found
    reason = "ansible-playbook not found beside this Python or on PATH: pip install -e '.[test]' (ansible-core)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {reason}")
    pytest.skip(reason)


def _syntax_check(playbook: Path) -> None:
    env = dict(os.environ, ANSIBLE_LOCAL_TEMP=str(playbook.parent / "ansible-tmp"),
               ANSIBLE_HOME=str(playbook.parent / "ansible-home"))
    proc = subprocess.run([_ansible_playbook(), "--syntax-check", "-i", "localhost,", str(playbook)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=playbook.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _probe(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp / "state"))
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=ROOT)


@pytest.fixture(scope="module")
def ten_hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stored run of ten demo hosts, three of them failed (30 %)."""
    tmp = tmp_path_factory.mktemp("remediate")
    drain = tmp / "drain.txt"
    proc = _probe("run", "-l", ",".join(HEALTHY + FAILED), "--results", str(tmp / "runs"), "-q",
                  "--slurm-drain", str(drain), tmp=tmp)
    assert proc.returncode == 1, proc.stderr  # fail findings
    assert "no node drained, the list is refused" in proc.stderr
    return tmp


def test_the_drain_list_refuses_a_30_percent_drain_and_names_the_rules(ten_hosts: Path) -> None:
    text = (ten_hosts / "drain.txt").read_text()
    assert not [ln for ln in text.splitlines() if not ln.startswith("#")]  # `sh drain.txt` drains nothing
    assert "3 node(s) with fail findings: NOT drained" in text
    assert ("refused: 3 of 10 host(s) of the fleet would be taken out, more than 10% (1 allowed): the rules that "
            "would take them: ") in text
    for rule in ("gpu.count.pci_vs_nvml", "gpu.row_remap.failure", "nvlink.link.down"):
        assert f"{rule} (1 host(s))" in text
    # --force writes it, and says it overrode the guard; a 30 % limit allows it
    for extra in (["--force"], ["--max-drain", "30"]):
        out = ten_hosts / f"drain{len(extra)}.txt"
        proc = _probe("run", "-l", ",".join(HEALTHY + FAILED), "--results", str(ten_hosts / "again"), "-q",
                      "--slurm-drain", str(out), *extra, tmp=ten_hosts)
        assert proc.returncode == 1, proc.stderr
        lines = [ln for ln in out.read_text().splitlines() if ln.startswith("unless_foreign_reason scontrol ")]
        assert sorted(shlex.split(ln)[3] for ln in lines) == [f"NodeName={h}" for h in sorted(FAILED)]
        assert ("written with --force over the guard" in out.read_text()) == (extra == ["--force"])


def test_remediation_is_refused_without_force_and_written_with_it(ten_hosts: Path) -> None:
    fix = ten_hosts / "fix.yml"
    proc = _probe("remediate", "--results", str(ten_hosts / "runs"), "-o", str(fix), tmp=ten_hosts)
    assert proc.returncode == 2 and not fix.exists()
    assert "remediation refused: 3 of 10 host(s) of the fleet would be taken out" in proc.stderr
    proc = _probe("remediate", "--results", str(ten_hosts / "runs"), "-o", str(fix), "--force", tmp=ten_hosts)
    assert proc.returncode == 0, proc.stderr
    _syntax_check(fix)
    plays = ansible_yaml(fix.read_text())
    by_name = {p["name"].split(": ", 1)[1]: p for p in plays}
    assert list(by_name) == ["drain in Slurm", "reboot", "verify and resume in Slurm"]
    assert by_name["drain in Slurm"]["hosts"] == FAILED
    assert set(by_name["drain in Slurm"]["vars"]["fleetprobe_drain_reason"]) == set(FAILED)
    assert by_name["reboot"]["hosts"] == ["dgx-h100-04"] and by_name["reboot"]["serial"] == 1
    # only the host acted on is checked again and resumed: the two that need hands stay drained
    assert by_name["verify and resume in Slurm"]["hosts"] == ["dgx-h100-04"]
    header = [ln for ln in fix.read_text().splitlines() if ln.startswith("#")]
    assert "# dgx-a100-04: rma: gpu.row_remap.failure on GPU3 (0000:4e:00.0): a row remap failed: uncorrectable " \
           "memory not repaired" in header
    assert any(ln.startswith("# Written with --force over the blast-radius guard") for ln in header)


def _doc(findings: list[dict[str, Any]], hosts: list[str]) -> dict[str, Any]:
    return {"run": {"id": "r1"}, "hosts": [{"name": h, "outcome": "ok", "class": "8xH100"} for h in hosts],
            "findings": findings}


def _f(host: str, fid: str, subject: str, severity: str = "fail", **kw: Any) -> dict[str, Any]:
    return {"id": fid, "host": host, "severity": severity, "kind": "fault", "subject": subject, "message": "m",
            "evidence": [], "hint": "", **kw}


def test_every_automated_action_as_a_playbook_ansible_accepts(tmp_path: Path) -> None:
    hostile = "GPU0 (0000:18:00.0)\n- hosts: all\n  tasks: [{command: reboot}] $(reboot)"
    fleet = judged(_doc([
        # reset the GPU, where idle: the one its devices name (issue 46: never read from the subject)
        _f("n1", "gpu.row_remap.pending", "GPU3 (0000:5d:00.0)",
           devices=[{"kind": "gpu", "gpu": 3, "bus_id": "0000:5d:00.0"}]),
        _f("n2", "nvlink.fabric.incomplete", "GPU5 (0000:ab:00.0)"),  # restart the fabric manager
        _f("n3", "gpu.lost", "GPU1 (0000:2a:00.0)"),  # reboot
        _f("n4", "sensor.fan.zero_while_hot", hostile, severity="warn"),  # hands, and a hostile subject
        _f("n5", "host.driver.version", "nvidia driver"),  # configure: listed, never automated
    ], [f"n{i}" for i in range(1, 21)]))
    plan = remedy.plan(fleet, force=False, min_severity=Severity.WARN)
    assert plan.blocked  # 4 of 20 hosts taken out: more than 10 % (2 allowed)
    assert plan.refused[0].text(0.10).startswith("4 of 20 host(s) of the fleet would be taken out")
    with pytest.raises(ValueError, match="refused"):
        render_playbook(plan)
    text = render_playbook(remedy.plan(fleet, force=True, min_severity=Severity.WARN))
    out = tmp_path / "fix.yml"
    out.write_text(text)
    _syntax_check(out)
    plays = ansible_yaml(text)
    names = [p["name"].split(": ", 1)[1] for p in plays]
    assert names == ["drain in Slurm", "reset GPUs where idle", "restart services", "reboot",
                     "verify and resume in Slurm"]
    play = {n: p for n, p in zip(names, plays)}
    assert play["drain in Slurm"]["hosts"] == ["n1", "n2", "n3", "n4"]  # n5 only needs configuring
    assert play["reset GPUs where idle"]["vars"] == {"fleetprobe_targets": ["n1"],
                                                     "fleetprobe_reset_gpus": {"n1": ["0000:5d:00.0"]}}
    reset_tasks = play["reset GPUs where idle"]["tasks"]
    assert reset_tasks[1]["ansible.builtin.fail"] and "length > 0" in reset_tasks[1]["when"]  # refuses a busy GPU
    assert reset_tasks[2]["ansible.builtin.command"]["argv"][:2] == ["nvidia-smi", "-r"]
    assert play["restart services"]["vars"] == {"fleetprobe_targets": ["n2"],
                                                "fleetprobe_services": {"n2": ["nvidia-fabricmanager"]}}
    assert play["reboot"]["hosts"] == ["n3"]
    assert play["verify and resume in Slurm"]["hosts"] == ["n1", "n2", "n3"]  # n4 needs hands: stays drained
    # the hostile subject stays inside one comment line: no play of its own
    assert len(plays) == 5 and all("$(reboot)" not in str(p) for p in plays)
    assert "# n5: configure: host.driver.version on nvidia driver" in text


def test_the_guard_counts_the_fleet_and_each_class() -> None:
    classes = {f"a{i}": "A" for i in range(10)} | {f"b{i}": "B" for i in range(30)}
    # 3 of 40 hosts is under 10 % of the fleet, but 3 of class A's 10 is 30 % of that class
    refused = remedy.guard({"a0": ["gpu.lost"], "a1": ["gpu.lost"], "a2": ["nvlink.link.down"]}, classes, 0.10)
    assert [(r.scope, r.hosts, r.of, r.limit) for r in refused] == [("class A", 3, 10, 1)]
    assert refused[0].rules == (("gpu.lost", 2), ("nvlink.link.down", 1))
    assert remedy.guard({"a0": ["gpu.lost"]}, {"a0": "A"}, 0.10) == ()  # one host is never a blast
    assert Action.REBOOT.rank > Action.RESET_GPU.rank
