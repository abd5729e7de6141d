"""One number never ends the run (issue 45 item 4), through the real CLI: `probe import FILE --host X`
of a perftest, an nccl-tests and a kernel-log output with one hostile number (or a 1 MiB line) in
one row exits as a good import does, never 70, and keeps the good rows' facts in strict JSON."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import run_cli

ROOT = Path(__file__).resolve().parents[2]
PERFTEST = ROOT / "tests" / "fixtures" / "fabric" / "ib_write_bw_a_hdr_cx6_2node_client_01.txt"
NCCL = ROOT / "tests" / "fixtures" / "evidence" / "nccl_all_reduce_2x8_h100_a3mega_01.txt"
KMSG = ROOT / "tests" / "fixtures" / "evidence" / "dmesg_iso_xid48_63_94_peermem_gpud_01.txt"

MIB = 1 << 20
HOSTILE = {"5000 digits": "9" * 5000, "1e400": "1e400", "nan": "nan", "-inf": "-inf", "negative": "-5",
           "1e30": "1e30", "12abc": "12abc"}


def _import(tmp_path: Path, name: str, text: str) -> Any:
    path = tmp_path / name
    path.write_text(text)
    got = run_cli(["import", str(path), "--host", "gpu07", "--results", str(tmp_path / "runs"), "--format", "json"],
                  timeout=120)
    assert got.code != 70 and "Traceback" not in got.stderr, got.stderr[-2000:]
    assert got.code in (0, 1, 4, 5), got.stderr[-2000:]
    [host] = json.loads(got.stdout, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))["hosts"]
    assert host["name"] == "gpu07"
    return host, got


def _swap_row(text: str, row: str, column: int, token: str) -> str:
    lines = text.split("\n")
    i = next(n for n, line in enumerate(lines) if re.search(row, line))
    a, b = [m.span() for m in re.finditer(r"\S+", lines[i])][column]
    lines[i] = lines[i][:a] + token + lines[i][b:]
    return "\n".join(lines)


@pytest.mark.parametrize("hostile", [*HOSTILE, "1 MiB line"])
def test_a_perftest_import_with_one_hostile_number_keeps_its_measurement(tmp_path: Path, hostile: str) -> None:
    text = PERFTEST.read_text()
    if hostile == "1 MiB line":
        text = text.replace(" 65536 ", "x" * MIB + "\n 65536 ", 1)
    else:  # the #bytes of one row, and the bandwidth of another
        text = _swap_row(_swap_row(text, r"^\s*65536\s+5000\s", 0, HOSTILE[hostile]), r"^\s*131072\s+5000\s", 3,
                         HOSTILE[hostile])
    host, _ = _import(tmp_path, "ib_write_bw.txt", text)
    # the run's figure is its largest message's row, untouched: 195.603 Gb/s
    assert [m["value"] for m in host["facts"]["fabric"]["measurements"]] == [195.603]


@pytest.mark.parametrize("hostile", [*HOSTILE, "1 MiB line"])
def test_an_nccl_tests_import_with_one_hostile_number_keeps_the_other_rows(tmp_path: Path, hostile: str) -> None:
    text = NCCL.read_text()
    (tmp_path / "clean").mkdir()
    clean, _ = _import(tmp_path / "clean", "nccl.txt", text)
    if hostile == "1 MiB line":
        text = re.sub(r"(?m)^(\s*1048576\s+262144\s+float)", "x" * MIB + r"\n\1", text, count=1)
    else:
        text = _swap_row(_swap_row(text, r"^\s*1048576\s+262144\s+float", 7, HOSTILE[hostile]),
                         r"^\s*2097152\s+524288\s+float", 0, HOSTILE[hostile])
    host, _ = _import(tmp_path, "nccl.txt", text)
    [group] = host["facts"]["fabric"]["nccl"]
    [want] = clean["facts"]["fabric"]["nccl"]
    assert group["busbw_gbps"] == want["busbw_gbps"] is not None  # the largest all_reduce is kept
    busbw = [r["busbw_gbps"] for r in group["results"] if r["busbw_gbps"] is not None]
    assert all(0 <= b <= 20000 for b in busbw)
    lost = len(want["results"]) - len(group["results"])
    assert lost == (0 if hostile == "1 MiB line" else 4), lost  # two rows, out-of-place and in-place each


@pytest.mark.parametrize("long", ["x" * MIB, "9" * MIB, "NVRM: Xid (PCI:0000:19:00): " + "9" * 5000 + ", x"])
def test_a_kernel_log_import_keeps_the_xid_after_a_hostile_line(tmp_path: Path, long: str) -> None:
    lines = KMSG.read_text().split("\n")
    at = next(i for i, x in enumerate(lines) if "Xid" in x)
    host, got = _import(tmp_path, "dmesg.txt", "\n".join([*lines[:at], long, *lines[at:]]))
    codes = [e["code"] for e in host["facts"]["kmsg"]["events"] if e["kind"] == "xid"]
    assert codes[:3] == [48, 63, 94], codes
    assert "None" not in got.stderr


# ------------------------------------------------------------------------------ the live road: fabric qualification

HOSTILE_TOOL = """#!/usr/bin/env python3
# a perftest whose table carries hostile numbers: a 5,000-digit #bytes in its first row, NaN and
# a negative bandwidth in the next ones; the rest is the real (simulated) tool's output
import os, re, subprocess, sys
real = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "..", "sbin", os.path.basename(sys.argv[0]))
proc = subprocess.run([real] + sys.argv[1:], stdout=subprocess.PIPE)
rows = 0
out = []
for line in proc.stdout.decode().split("\\n"):
    m = re.match(r"^(\\s*)(\\d+)(\\s+\\d+\\s+)(\\S+)(\\s+)(\\S+)(.*)$", line)
    if m:
        rows += 1
        out.append(m.group(1) + "9" * 5000 + m.group(3) + m.group(4) + m.group(5) + m.group(6) + m.group(7))
        out.append(line.replace(m.group(6), "nan", 1) if rows == 1 else line)
        out.append(line.replace(m.group(6), "-5", 1) if rows == 1 else line)
        out.append(line)
    else:
        out.append(line)
sys.stdout.write("\\n".join(out))
sys.exit(proc.returncode)
"""


@pytest.mark.slow
@pytest.mark.ssh
def test_a_host_s_hostile_perftest_numbers_cost_only_its_rows_in_a_fabric_run(sshd: Any, tmp_path: Path) -> None:
    import os

    from orchestrator.simulate.fabric import random_scenario
    from tests.support.fabric import FAST, fabric_run, fabric_setup, names

    hosts = 4
    setup = fabric_setup(tmp_path, sshd, tmp_path / "libs", hosts, 1, random_scenario(names(hosts), 1, 0, ()), dict(FAST))
    root = setup.fleet.hosts[0].root
    path, moved = root / "usr/bin/ib_write_bw", root / "usr/sbin/ib_write_bw"
    moved.parent.mkdir(parents=True, exist_ok=True)
    moved.symlink_to(os.readlink(path))
    path.unlink()
    path.write_text(HOSTILE_TOOL)
    path.chmod(0o755)
    rc, err, doc = fabric_run(setup)  # a fleet document, not exit 70
    assert rc != 70 and "Traceback" not in err, err[-3000:]
    assert {h["name"] for h in doc["hosts"]} == set(names(hosts))
    hostile = next(h for h in doc["hosts"] if h["name"] == names(hosts)[0])
    values = [m["value"] for m in hostile["facts"]["fabric"]["measurements"] if m["test"] == "ib_write_bw"]
    assert values and all(v is not None and math.isfinite(v) and 0 < v <= 3200 for v in values), values
