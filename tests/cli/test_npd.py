"""`probe npd` answers Node Problem Detector's custom-plugin contract (issue 50 item 3).

The plugin runs as NPD runs it: a real process, the real probes over the local transport, on a
simulated node (its sysfs and compiled fake NVML).  Exit 0 and one line for a healthy node; 1 and
one line of at most 80 bytes naming the root fault for a faulty one; 2, never 0, where the probes
cannot answer; and 2 within `--timeout` when they hang, so NPD never has to kill the plugin.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.present.npd import MAX_MESSAGE, OK, PROBLEM, UNKNOWN, fit, npd_answer
from orchestrator.simulate.hostfiles import build_kernel_log
from orchestrator.simulate.sysfs import build_nic_state
from orchestrator.verdict import rules
from tests.support.collected import local_inventory
from tests.support.fleet import build_simulated_host, demo_machine, write_script
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet, host

ROOT = Path(__file__).resolve().parents[2]


def _npd(tmp: Path, inventory: Path, node: str, timeout: float = 60) -> tuple[int, str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp / "state"))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "npd", "-i", str(inventory), "--node", node,
                           "--timeout", f"{timeout:g}"], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=timeout + 60)
    return proc.returncode, proc.stdout, time.monotonic() - start


def _one_line(out: str) -> str:
    assert out.endswith("\n") and out.count("\n") == 1, repr(out)
    line = out[:-1]
    assert 0 < len(line.encode()) <= MAX_MESSAGE and line.startswith("fleetprobe: "), repr(line)
    return line


def _node(tmp: Path, name: str, extra: dict | None = None) -> Path:
    """The demo node `name` simulated for every audit probe, as the demo recorder builds it."""
    sim = build_simulated_host(name, demo_machine(name), tmp / "sim")
    build_kernel_log(sim.machine, sim.root, name)
    build_nic_state(sim.machine, sim.root, name)
    args = {**sim.probe_vars()["probe_args"], "kmsg": {"root": str(sim.root)}, "nic": {"root": str(sim.root)}}
    inv = tmp / "inventory.yml"
    inv.write_text(local_inventory([sim], {name: {"probe_args": args, **(extra or {})}}))
    return inv


def test_a_healthy_node_is_0(tmp_path: Path):
    rc, out, _ = _npd(tmp_path, _node(tmp_path, "dgx-h100-01"), "dgx-h100-01")
    assert (rc, _one_line(out)) == (OK, "fleetprobe: healthy")


@pytest.mark.parametrize(("name", "area"), [("dgx-h100-04", "nvlink."), ("dgx-h100-06", "pcie.")])
def test_a_faulty_node_is_1_naming_its_root_fault(tmp_path: Path, name: str, area: str):
    rc, out, _ = _npd(tmp_path, _node(tmp_path, name), name)
    line = _one_line(out)
    fault_id = line.split()[1]
    assert rc == PROBLEM and fault_id in rules.BY_ID and fault_id.startswith(area), line


def _broken_interpreter(tmp: Path, body: str) -> dict:
    return {"ansible_python_interpreter": str(write_script(tmp / "python3", body))}


@pytest.mark.parametrize("body", ["exit 1", "echo 'not a probe envelope'", "cat >/dev/null; exit 0", "kill -9 $$"])
def test_a_node_whose_probes_cannot_answer_is_2_never_0(tmp_path: Path, body: str):
    inv = _node(tmp_path, "dgx-h100-01", _broken_interpreter(tmp_path, body))
    rc, out, _ = _npd(tmp_path, inv, "dgx-h100-01")
    line = _one_line(out)
    assert rc == UNKNOWN, line


def test_hung_probes_answer_2_within_the_timeout(tmp_path: Path):
    inv = _node(tmp_path, "dgx-h100-01", _broken_interpreter(tmp_path, "sleep 300"))
    rc, out, took = _npd(tmp_path, inv, "dgx-h100-01", timeout=6)
    line = _one_line(out)
    # the probes' own deadline (a share of --timeout) or the plugin's: whichever the machine's load
    # lets fire first, the answer is "unknown" and says the probes did not finish
    assert rc == UNKNOWN and ("no verdict within 6s" in line or "did not finish within" in line), line
    # a bound that catches waiting for the hung probe (300 s), not a speed check
    assert took < 6 + 30
    assert not _running_from(tmp_path), "the hung probe was left running"


def _running_from(tmp: Path) -> list[int]:
    """Processes whose command line names a file under `tmp` (the hung interpreter script)."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and str(tmp) in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                out.append(int(entry))
        except OSError:
            continue
    return out


HOSTILE_SUBJECTS = ["GPU0 link 1\nfleetprobe: healthy", "x" * 300, "\u00e9" * 100, "bell\x07\x1b[31mred",
                    "GPU\u202e7 link 2", "\t" * 90]


@pytest.mark.parametrize("subject", HOSTILE_SUBJECTS)
def test_the_message_is_one_line_of_at_most_80_bytes_whatever_the_subject(subject: str):
    f = judged(fleet("r", [host("n1")], [finding("nvlink.link.down", "n1", subject)]))
    answer = npd_answer(f, "n1")
    assert answer.status == PROBLEM
    assert "\n" not in answer.message and len(answer.message.encode()) <= MAX_MESSAGE
    assert answer.message.startswith("fleetprobe: nvlink.link.down")
    answer.message.encode().decode("utf-8")  # never half a character


def test_no_verdict_for_the_node_is_unknown():
    f = judged(fleet("r", [host("n1")], []))
    assert npd_answer(f, "other").status == UNKNOWN
    assert fit("a" * 200).endswith("...") and len(fit("a" * 200)) == MAX_MESSAGE


@pytest.mark.parametrize("text", [None, "all:\n  hosts: [oops\n", "- a list\n- not an inventory\n", "\x00\xff"])
def test_an_inventory_it_cannot_read_is_2_with_the_reason_on_stdout(tmp_path: Path, text: str | None):
    inv = tmp_path / "node.yml"
    if text is not None:
        inv.write_bytes(text.encode("latin-1"))
    rc, out, _ = _npd(tmp_path, inv, "n1", timeout=30)
    line = _one_line(out)
    assert rc == UNKNOWN and line.startswith("fleetprobe: inventory: "), line
