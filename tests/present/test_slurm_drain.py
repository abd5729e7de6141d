"""--slurm-drain: one scontrol line per node with fail findings; nothing a shell or Slurm would misread."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from orchestrator.present.outputs import slurm_drain as drain
from orchestrator.present.outputs.slurm_drain import MAX_REASON
from orchestrator.verdict import remedy
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


GUARD = "unless_foreign_reason "  # each line's shell function: it skips a node with a foreign reason


def commands(text: str) -> list[str]:
    """The scontrol commands of the lines, without the guard each goes through."""
    return [ln[len(GUARD):] for ln in text.splitlines() if ln.startswith(GUARD)]


def test_one_line_per_failing_node_with_its_ids() -> None:
    fleet = {"run": {"id": "20261201T1030Z-ab12"}, "findings": [
        _finding("node2", "nvlink.link.down"), _finding("node2", "gpu.count.mismatch"),
        {**_finding("node2", "nvlink.link.down"), "subject": "GPU3"}, _finding("node1", "sensor.fan.zero_while_hot", "warn"),
        _finding("node3", "pcie.acs.enabled")]}
    text = render_drain(fleet)
    assert text.startswith("# fleetprobe run 20261201T1030Z-ab12: 2 node(s)")
    assert drain.DRAIN_GUARD in text  # defined before the lines use it
    assert commands(text) == [
        'scontrol update NodeName=node2 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: '
        'gpu.count.mismatch,nvlink.link.down"',
        'scontrol update NodeName=node3 State=DRAIN Reason="fleetprobe 20261201T1030Z-ab12: pcie.acs.enabled"']
    for line in commands(text):  # the shell sees exactly four words after scontrol
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
    text = render_drain(fleet)
    lines = text.splitlines()
    assert not commands(text) and not [ln for ln in lines if "scontrol" in ln and not ln.startswith("#")]
    # a name ending in a newline is no name Slurm knows either: it must not split its line in two
    assert len([ln for ln in lines if ln.startswith("# not a Slurm node name")]) == len(bad) + 1


def test_a_long_reason_is_cut_and_counts_the_rest() -> None:
    ids = [f"area{i}.something.rather_long_{i}" for i in range(40)]
    fleet = {"run": {"id": "r"}, "findings": [{**_finding("gpu01", i), "subject": i} for i in ids]}
    [line] = commands(render_drain(fleet))
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
    [line] = commands("\n".join(lines))
    words = shlex.split(line)
    assert words[:4] == ["scontrol", "update", "NodeName=node1", "State=DRAIN"] and len(words) == 5
    assert not set(words[4]) & set("$`;|&'\\\"\n\r\u2028\u0085{}")  # nothing a shell or a reader expands


RESUME = "if_fleetprobe_reason "  # each resume line's shell function: only fleetprobe's own drains


def test_the_resume_list_names_only_hosts_this_run_found_clean() -> None:
    """Issue 47: a resume list beside the drain list.  Not clean, so never listed: a fail fault, a
    warn fault whose action takes the host out (hands), a host that did not answer, a host whose
    probes did not finish (an unmeasured fault is no cleared fault), a name Slurm would misread."""
    hosts = [{"name": n, "outcome": "ok"} for n in ("clean1", "clean2", "failed1", "hands1", "configure1")]
    hosts += [{"name": "gone1", "outcome": "unreachable", "reason": "no route to host"},
              {"name": "cut1", "outcome": "ok", "probes": {"nvml": {"outcome": "timeout", "reason": "60 s"}}},
              {"name": "node[1-4]", "outcome": "ok"}, {"name": "a,b", "outcome": "ok"}]
    doc = {"run": {"id": "r9"}, "hosts": hosts,
           "findings": [_finding("failed1", "gpu.lost"), _finding("hands1", "sensor.fan.zero_while_hot", "warn"),
                        _finding("configure1", "host.driver.version", "warn")]}
    text = drain.render_resume(judged(doc))
    assert [ln[len(RESUME):] for ln in text.splitlines() if ln.startswith(RESUME)] == [
        f"scontrol update NodeName={h} State=RESUME" for h in ("clean1", "clean2", "configure1")]
    assert drain.RESUME_GUARD in text and text.index(drain.RESUME_GUARD) < text.index(RESUME + "scontrol")
    assert sum(ln.startswith("# not a Slurm node name, left out: ") for ln in text.splitlines()) == 2
    # nothing clean: comments only, `sh FILE` resumes nothing
    empty = drain.render_resume(judged({"run": {"id": "r9"}, "hosts": hosts[2:3], "findings": doc["findings"][:1]}))
    assert not [ln for ln in empty.splitlines() if not ln.startswith("#")]


def test_the_guards_read_the_reason_when_they_run_and_know_fleetprobes_prefix() -> None:
    """The shell functions: the drain skips a node whose reason is not empty and not fleetprobe's,
    the resume acts only on fleetprobe's; the prefix is the one every reason of the list starts with."""
    assert "scontrol show node" in drain.DRAIN_GUARD and "scontrol show node" in drain.RESUME_GUARD
    assert '""|"fleetprobe "*) "$@" ;;' in drain.DRAIN_GUARD
    assert '"fleetprobe "*) "$@" ;;' in drain.RESUME_GUARD and '""|' not in drain.RESUME_GUARD
    fleet = {"run": {"id": "r"}, "findings": [_finding("node1", "gpu.lost")]}
    [line] = commands(render_drain(fleet))
    assert shlex.split(line)[-1].startswith(f"Reason={remedy.DRAIN_REASON_PREFIX}")
