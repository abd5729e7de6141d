"""`probe run -p fabric` of the bundled demo fleet names the planted host, rail and pair.

The demo's fabric answers were recorded from the real qualification over the simulated DGX H100
hosts (orchestrator/simulate/record_fabric.py, DEMO_SCENARIO) and are replayed step by step; the
plan, the parsing of every perftest output, the localisation and the findings run for real here.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from orchestrator.simulate.record import RECORDINGS
from orchestrator.simulate.record_fabric import DEMO_SCENARIO, cut_answer
from orchestrator.transport.base import CommandResult
from tests.support.fabric import finding_keys, rail_hosts
from tests.support.fleet import Cli

H100 = [f"dgx-h100-{i:02d}" for i in range(1, 25)]


def test_the_demo_names_the_planted_host_rail_and_pair(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    proc, fleet = cli.run_json("run", "-p", "fabric", timeout=300)
    planted = DEMO_SCENARIO.planted()
    assert planted == {"fabric.host.slow": {("dgx-h100-03",)},
                       "fabric.path.slow": {("dgx-h100-01", "dgx-h100-20", "mlx5_2")},
                       "fabric.rail.slow": {("mlx5_6",)}}
    # and the demo's own fault shows through: dgx-h100-19's mlx5_5 trained at 100 Gb/s
    assert finding_keys(fleet) == {**planted, "fabric.hca.slow": {("dgx-h100-19", "mlx5_5")}}
    assert rail_hosts(fleet, "mlx5_6") == set(H100)
    hca = next(f for f in fleet["findings"] if f["id"] == "fabric.hca.slow")
    assert "active at 100 Gb/sec (4X EDR) where the rail's other ports run 400 Gb/s" in hca["message"]
    host = next(f for f in fleet["findings"] if f["id"] == "fabric.host.slow")
    assert host["actual"] < host["expected"] == 360.0 and host["evidence"]
    # the plan was said before it ran; the other demo hosts take no part: no recording (skipped with that reason),
    # this machine without an active port, the unreachable host (skipped)
    assert "24 host(s) x 8 rail(s): 23 round(s) of 30 s (+ at most 2 extra)" in proc.stderr
    by_name = {h["name"]: h for h in fleet["hosts"]}
    # every step of every demo fabric host was recorded whole (the ring over every GPU included)
    assert {h: by_name[h]["probes"]["fabric"]["outcome"] for h in H100} == dict.fromkeys(H100, "ok")
    assert by_name["dgx-h100-19"]["health"]["state"] == "failed"  # its slow HCA, from the pairs it finished
    others = [h for h in by_name if h not in H100]
    assert others and all(by_name[h]["probes"]["fabric"]["outcome"] in ("unsupported", "skipped") for h in others)
    # dgx-h100-18's mlx5_3 is down: rail 3 is measured without it, and nothing is blamed for it
    facts18 = by_name["dgx-h100-18"]["facts"]["fabric"]
    assert not [m for m in facts18["measurements"] if m["hca"] == "mlx5_3"]
    # the fabric view shows what was measured
    view = cli.run("show", "--show", "fabric")
    assert view.returncode == 0, view.stderr
    assert "== dgx-h100-03: fabric" in view.stdout
    assert "plan: 24 hosts x 8 rails, 23 rounds (+0 extra), 30 s per round" in view.stdout


RECORDED = sorted(RECORDINGS.glob("*/fabric/*.stdout.gz"))


def test_every_recorded_fabric_answer_is_whole() -> None:
    # the replay hands a recorded answer back as a clean exit: one cut off while it was recorded
    # (start mark alone, said lines alone) would replay as a host that printed nothing
    assert len(RECORDED) > 24 * 10
    cut = {str(p.relative_to(RECORDINGS)): why for p in RECORDED
           if (why := cut_answer(CommandResult(0, gzip.decompress(p.read_bytes()), b"", 1.0)))}
    assert cut == {}


WHOLE = b'FPSTART 1\nFPSAY {"nccl_id": "00"}\n{"envelope_version": 1, "probe": "nccl", "status": "ok"}\n'


@pytest.mark.parametrize(("res", "why"), [
    (CommandResult(None, b"FPSTART 1\n", b"", 130.0, timed_out=True), "killed at its deadline after 130.0 s"),
    (CommandResult(None, WHOLE, b"", 130.0, timed_out=True), "killed at its deadline"),
    (CommandResult(None, WHOLE, b"", 2.0, stdout_truncated=True), "passed the transport's cap"),
    (CommandResult(5, b"FPSTART 1\n", b"", 47.0), "exit status 5 after 47.0 s"),
    (CommandResult(-11, b"FPSTART 1\n", b"x\nSegmentation fault\n", 47.0), "stderr: Segmentation fault"),
    (CommandResult(3, WHOLE, b"", 2.0), "exit status 3"),
    (CommandResult(0, b"FPSTART 1\n", b"", 1.0), "no envelope"),
    (CommandResult(0, b'FPSTART 1\nFPSAY {"nccl_id": "00"}\n', b"", 1.0), "no envelope"),
    (CommandResult(0, b"", b"", 1.0), "no envelope"),
    (CommandResult(0, b"FPSTART 1\n \n\t\n", b"", 1.0), "no envelope"),
])
def test_the_recorder_refuses_an_answer_cut_off(res: CommandResult, why: str) -> None:
    problem = cut_answer(res)
    assert problem is not None and why in problem


def test_the_recorder_keeps_a_whole_answer() -> None:
    assert cut_answer(CommandResult(0, WHOLE, b"", 47.0)) is None
    assert cut_answer(CommandResult(0, WHOLE[len(b"FPSTART 1\n"):], b"", 47.0)) is None
