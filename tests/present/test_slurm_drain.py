"""--slurm-drain: one scontrol line per node with fail findings; nothing a shell or Slurm would misread."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from orchestrator.present.outputs import slurm_drain as drain
from orchestrator.present.outputs.slurm_drain import MAX_REASON
from orchestrator.verdict.remedy import drain_plan
from tests.support.hostile_strings import corpus
from tests.support.judged import judged


def _finding(host: str, fid: str, severity: str = "fail") -> dict[str, Any]:
    return {"id": fid, "host": host, "severity": severity, "kind": "fault", "subject": "s", "message": "m",
            "evidence": [], "hint": ""}


def render_drain(doc: dict[str, Any]) -> str:
    """The lines of these small hand-made fleets, the blast-radius guard overridden (its refusal is
    test_a_list_that_would_drain_too_much_is_comments_only's)."""
    fleet = judged(doc)
    return drain.render_drain(fleet, drain_plan(fleet, force=True))


def test_one_line_per_failing_node_with_its_ids() -> None:
    fleet = {"run": {"id": "20261201T1030Z-ab12"}, "findings": [
        _finding("node2", "nvlink.link.down"), _finding("node2", "gpu.count.mismatch"),
        {**_finding("node2", "nvlink.link.down"), "subject": "GPU3"}, _finding("node1", "sensor.fan.zero_while_hot", "warn"),
        _finding("node3", "pcie.acs.enabled")]}
    lines = render_drain(fleet).splitlines()
    assert lines[0].startswith("# fleetprobe run 20261201T1030Z-ab12: 2 node(s)")
    assert lines[1:] == [
        'scontrol update NodeName=node2 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: '
        'gpu.count.mismatch,nvlink.link.down"',
        'scontrol update NodeName=node3 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: pcie.acs.enabled"']
    for line in lines[1:]:  # the shell sees exactly four words after scontrol
        assert len(shlex.split(line)) == 5


def test_a_list_that_would_drain_too_much_is_comments_only() -> None:
    doc = {"run": {"id": "r"}, "hosts": [{"name": f"node{i}", "outcome": "ok"} for i in range(10)],
           "findings": [_finding("node1", "gpu.lost"), _finding("node2", "gpu.lost"), _finding("node3", "nvlink.link.down")]}
    text = drain.render_drain(judged(doc))  # the verdict's default decision: 10 % of the fleet
    assert not [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert "# refused: 3 of 10 host(s) of the fleet would be taken out, more than 10% (1 allowed): the rules " \
           "that would take them: gpu.lost (2 host(s)), nvlink.link.down (1 host(s))" in text


def test_names_slurm_or_the_shell_would_misread_are_left_out() -> None:
    bad = ["node[1-4]", "a,b", "$(reboot)", "n1 State=RESUME", "node1#2", "-x"]
    fleet = {"run": {"id": "r"}, "findings": [_finding(h, "gpu.lost") for h in [*bad, "node\n"]]}
    lines = render_drain(fleet).splitlines()
    assert not [ln for ln in lines if ln.startswith("scontrol")]
    # a name ending in a newline is no name Slurm knows either: it must not split its line in two
    assert len([ln for ln in lines if ln.startswith("# not a Slurm node name")]) == len(bad) + 1


def test_a_long_reason_is_cut_and_counts_the_rest() -> None:
    ids = [f"area{i}.something.rather_long_{i}" for i in range(40)]
    fleet = {"run": {"id": "r"}, "findings": [{**_finding("gpu01", i), "subject": i} for i in ids]}
    line = render_drain(fleet).splitlines()[1]
    reason = shlex.split(line)[-1].split("=", 1)[1]
    assert len(reason) <= MAX_REASON
    assert reason.endswith(" more")
    assert render_drain({"run": {}, "findings": []}).splitlines() == ["# fleetprobe run run: 0 node(s) with fail "
                                                                      "findings; review, then apply with sh"]


def test_the_hostile_corpus_as_names_ids_and_run_id_stays_words_of_scontrol(tmp_path: Path) -> None:
    hostile = corpus(tmp_path / "PWNED")
    fleet = {"run": {"id": " ".join(hostile)},
             "findings": [*(_finding(h, "gpu.lost") for h in hostile), *(_finding("node1", h) for h in hostile)]}
    lines = render_drain(fleet).splitlines()
    assert sum(ln.startswith("# not a Slurm node name, left out: ") for ln in lines) == len(hostile)
    [line] = [ln for ln in lines if not ln.startswith("#")]
    words = shlex.split(line)
    assert words[:4] == ["scontrol", "update", "NodeName=node1", "State=DRAIN"] and len(words) == 5
    assert not set(words[4]) & set("$`;|&'\\\"\n\r\u2028\u0085{}")  # nothing a shell or a reader expands
