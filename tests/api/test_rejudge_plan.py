"""`probe rejudge` judges a stored run exactly as the run itself was judged: same findings, same exit
status, for every shipped playbook, `--expect`, several plays with their own expectations and
overrides, and shipped playbook names given to rejudge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.playbook import shipped_playbooks

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *args, "--format", "json"], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def findings(fleet: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    return sorted((f["host"], f["id"], f["severity"], f["kind"], f["subject"]) for f in fleet["findings"])


def run_then_rejudge(tmp_path: Path, *run_args: str, rejudge_args: tuple[str, ...] = ()
                     ) -> tuple[int, dict[str, Any], int, dict[str, Any]]:
    results, run_dir = tmp_path / "runs", tmp_path / "run"
    code, fleet = probe("run", "-l", "demo", "--results", str(results), "-o", str(run_dir), *run_args)
    again_code, again = probe("rejudge", str(run_dir), "--results", str(results), *rejudge_args)
    return code, fleet, again_code, again


@pytest.mark.parametrize("book", [name for name, _path, _what in shipped_playbooks()])
def test_rejudge_of_every_shipped_playbook_is_the_run_itself(tmp_path: Path, book: str) -> None:
    code, fleet, again_code, again = run_then_rejudge(tmp_path, "-p", book)
    assert findings(again) == findings(fleet) and fleet["findings"]
    assert again["silenced"] == fleet["silenced"]
    # the demo has fail findings on purpose (1), its recorded fabric qualification included (every
    # step of every host whole: no invalid output, no 4); rejudge says the same
    assert (again_code, code) == (1, 1)


def test_rejudge_keeps_the_runs_expect(tmp_path: Path) -> None:
    code, fleet, again_code, again = run_then_rejudge(tmp_path, "--probe", "nvml", "--expect", "gpu_count=99")
    mismatches = [f for f in fleet["findings"] if f["id"] == "gpu.count.mismatch"]
    assert len(mismatches) > 20  # every demo host with GPUs is off by the impossible count
    assert findings(again) == findings(fleet)
    assert again_code == code == 1


def test_rejudge_with_another_expect_or_playbook_judges_anew(tmp_path: Path) -> None:
    _code, fleet, _again_code, again = run_then_rejudge(tmp_path, "-p", "quick", rejudge_args=("--expect", "gpu_count=99"))
    assert not [f for f in fleet["findings"] if f["id"] == "gpu.count.mismatch" and "99" in str(f["expected"])]
    assert len([f for f in again["findings"] if f["id"] == "gpu.count.mismatch"]) > 20
    # a shipped name, as `probe run -p` takes it
    code, strict = probe("rejudge", str(tmp_path / "run"), "--results", str(tmp_path / "runs"), "-p", "premigration")
    assert code == 1 and any(f["id"] == "platform.virtualization" or f["host"] == "vm-a100-01" for f in strict["findings"])


PLAYS = """\
- name: h100 strict
  hosts: dgx_h100
  probes: [host, nvml]
  expect: {gpu_count: 7}
  findings:
    gpu.count.mismatch: {severity: warn, reason: "a spare is out for repair"}
- name: a100 as is
  hosts: dgx_a100
  probes: [host, nvml]
  expect: {gpu_count: 9}
"""


def test_each_play_judges_only_its_own_hosts_in_rejudge_as_in_the_run(tmp_path: Path) -> None:
    book = tmp_path / "two-plays.yml"
    book.write_text(PLAYS)
    code, fleet, again_code, again = run_then_rejudge(tmp_path, "-p", str(book))
    assert findings(again) == findings(fleet)
    assert again_code == code
    mismatch = {f["host"]: f["severity"] for f in fleet["findings"] if f["id"] == "gpu.count.mismatch"}
    h100 = {h["name"] for h in fleet["hosts"] if "dgx_h100" in h["groups"]}
    a100 = {h["name"] for h in fleet["hosts"] if "dgx_a100" in h["groups"]}
    # the h100 play's count (7: all but the one host missing a GPU are off) and its override reach
    # its hosts only; the a100 play's impossible 9 reaches every a100 host, without the override
    h100_off = h100 & set(mismatch)
    assert len(h100_off) == len(h100) - 1 and {mismatch[h] for h in h100_off} == {"warn"}
    assert a100 <= set(mismatch) and {mismatch[h] for h in a100} == {"fail"}
