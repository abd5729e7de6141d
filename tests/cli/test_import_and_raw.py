"""Text evidence through the whole pipeline: `probe import` files, and raw mode over real SSH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.evidence import EVIDENCE

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True,
                          env=env, cwd=cwd, timeout=120)


def finding_ids(fleet: dict) -> set[str]:
    return {f["id"] for f in fleet["findings"]}


def imported(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    r = probe("import", *args, "--results", str(tmp_path / "runs"), "--format", "json")
    assert "Traceback" not in r.stderr, r.stderr
    return r, json.loads(r.stdout)


def test_every_evidence_file_imports_without_a_traceback(tmp_path: Path) -> None:
    for f in sorted(EVIDENCE.glob("*.txt")):
        r = probe("import", str(f), "--results", str(tmp_path / "runs"), "-q")
        assert "Traceback" not in r.stderr, (f.name, r.stderr)
        assert r.returncode in (0, 1, 4, 5), (f.name, r.returncode, r.stderr)


def test_six_of_eight_gpus_in_a_topo_matrix_fails_the_count(tmp_path: Path) -> None:
    r, fleet = imported(tmp_path, str(EVIDENCE / "topo_h100_6gpu_visible_2nic_01.txt"), "--expect", "gpu_count=8")
    assert r.returncode == 1
    [f] = [f for f in fleet["findings"] if f["id"] == "gpu.count.mismatch"]
    assert f["expected"] == 8 and f["actual"] == 6


def test_downgraded_lnksta_fails_the_pcie_check(tmp_path: Path) -> None:
    _, fleet = imported(tmp_path, str(EVIDENCE / "lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt"))
    subjects = sorted(f["subject"] for f in fleet["findings"] if f["id"] == "pcie.link.downgraded")
    assert len(subjects) == 2 and "0000:01:00.0" in subjects[0] and "0000:03:00.0" in subjects[1]


def test_an_inactive_link_fails_the_link_check(tmp_path: Path) -> None:
    text = (EVIDENCE / "nvlink_s_i0_h100_sxm_18links_01.txt").read_text().splitlines()
    link_lines = [i for i, line in enumerate(text) if "Link 3:" in line]
    assert link_lines, "evidence layout changed"
    text[link_lines[0]] = text[link_lines[0]].split("Link 3:")[0] + "Link 3: <inactive>"
    f = tmp_path / "nvlink-s.txt"
    f.write_text("\n".join(text) + "\n")
    _, fleet = imported(tmp_path, str(f), "--host", "h100-a")
    down = [x for x in fleet["findings"] if x["id"] == "nvlink.link.down"]
    assert down and down[0]["kind"] == "fault" and "3" in down[0]["message"]


def test_files_of_one_host_merge_and_the_run_can_be_shown_and_rejudged(tmp_path: Path) -> None:
    files = [str(EVIDENCE / "topo_h100_sxm_8gpu_8nic_pix_01.txt"), str(EVIDENCE / "nvlink_s_i0_h100_sxm_18links_01.txt")]
    r, fleet = imported(tmp_path, *files, "--host", "offer-1", "--expect", "gpu_count=8")
    assert r.returncode == 0, r.stderr
    [host] = fleet["hosts"]
    assert host["name"] == "offer-1" and {"gpus", "nvlink", "topology"} <= set(host["facts"])
    shown = probe("show", "--results", str(tmp_path / "runs"), "--show", "topo")
    assert shown.returncode == 0 and "NV18" in shown.stdout and "PIX" in shown.stdout
    again = probe("rejudge", "latest", "--results", str(tmp_path / "runs"), "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["hosts"][0]["facts"]["topology"] == host["facts"]["topology"]


def test_malformed_input_gets_one_line_naming_the_file(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(os.urandom(4096))
    r = probe("import", str(junk), "--results", str(tmp_path / "runs"))
    assert "Traceback" not in r.stderr and "junk.bin" in r.stdout + r.stderr
    assert r.returncode == 4  # the host's evidence is invalid output
    missing = probe("import", str(tmp_path / "nope.txt"), "--results", str(tmp_path / "runs"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "nope.txt" in missing.stderr


def _stand_ins(bin_dir: Path) -> None:
    """nvidia-smi and lspci stand-ins that print published outputs, as on a host without Python."""
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        f'case "$*" in\n'
        f'  "topo -m") cat {EVIDENCE / "topo_h100_6gpu_visible_2nic_01.txt"} ;;\n'
        f'  "nvlink -s") cat {EVIDENCE / "nvlink_s_i0_h100_sxm_18links_01.txt"} ;;\n'
        '  *) echo "unsupported in this stand-in: $*" >&2; exit 3 ;;\n'
        "esac\n")
    lspci = bin_dir / "lspci"
    lspci.write_text(f"#!/bin/sh\n[ \"$1\" = -vvvnn ] && exec cat {EVIDENCE / 'lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt'}\nexit 1\n")
    for f in (smi, lspci):
        f.chmod(0o755)


@pytest.mark.ssh
def test_raw_mode_over_real_ssh_when_the_interpreter_is_missing(sshd, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bin_dir = tmp_path / "bin"
    _stand_ins(bin_dir)
    hosts = [
        sshd.host("no-python", ansible_python_interpreter="/nonexistent/python3", probe_raw_path=str(bin_dir),
                  probe_expect={"gpu_count": 8}),
        sshd.host("raw-by-choice", probe_mode="raw", probe_raw_path=str(bin_dir)),
        sshd.host("normal"),
    ]
    inv = tmp_path / "inv.yml"
    inv.write_text(sshd.inventory_yaml(hosts))
    r = probe("run", "-i", str(inv), "--probe", "host", "--probe", "nvml", "-o", str(tmp_path / "run"),
              "--format", "json")
    assert "Traceback" not in r.stderr, r.stderr
    fleet = json.loads(r.stdout)
    by = {h["name"]: h for h in fleet["hosts"]}
    nopy = by["no-python"]
    assert nopy["probes"]["raw"]["outcome"] == "ok"
    assert "raw mode" in nopy["probes"]["raw"]["reason"] and "/nonexistent/python3" in nopy["probes"]["raw"]["reason"]
    # The missing interpreter stays a failure to fix; the text facts are kept beside it.
    assert nopy["outcome"] == "failed" and nopy["probes"]["host"]["outcome"] == "failed"
    assert "/nonexistent/python3" in nopy["probes"]["host"]["reason"] and "raw mode used" in nopy["probes"]["host"]["reason"]
    assert len(nopy["facts"]["gpus"]["list"]) == 6 and nopy["facts"]["nvlink"]["gpus"]
    ids = {(f["host"], f["id"]) for f in fleet["findings"]}
    assert ("no-python", "gpu.count.mismatch") in ids and ("no-python", "probe.raw_mode") in ids
    assert ("raw-by-choice", "pcie.link.downgraded") in ids and ("raw-by-choice", "probe.raw_mode") in ids
    assert by["raw-by-choice"]["probes"]["host"]["outcome"] == "skipped"
    assert by["normal"]["probes"]["host"]["outcome"] == "ok" and "raw" not in by["normal"]["probes"]
    # The stored raw outputs re-judge to the same verdicts.
    again = probe("rejudge", str(tmp_path / "run"), "--results", str(tmp_path / "runs"), "--format", "json")
    assert {(f["host"], f["id"]) for f in json.loads(again.stdout)["findings"]} == ids
