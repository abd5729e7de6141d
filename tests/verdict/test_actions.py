"""The action-class table holds the catalog whole: every finding id has exactly one action class,
with the facts that justify it, and docs/findings.md lists each id with that class."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.verdict.actions import ACTIONS, Action, action_of
from orchestrator.verdict.checks import FINDING_IDS
from orchestrator.verdict.findings import Finding, Kind, Severity

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "findings.md"


def _finding(fid: str, message: str = "m", actual: object = None) -> Finding:
    return Finding(fid, Severity.FAIL, Kind.FAULT, "h", "GPU3 (0000:5d:00.0)", message, actual=actual)


def test_every_finding_id_has_exactly_one_action_class() -> None:
    assert len(FINDING_IDS) == len(set(FINDING_IDS))
    assert sorted(set(FINDING_IDS) - set(ACTIONS)) == []  # an id without a row
    assert sorted(set(ACTIONS) - set(FINDING_IDS)) == []  # a row for no id
    for fid, rule in ACTIONS.items():
        assert isinstance(rule.action, Action), fid
        assert rule.because.strip(), f"{fid}: say which facts justify the action"
        # a service to restart exactly where the action restarts one
        assert (rule.service is not None) == (rule.action is Action.RESTART_SERVICE), fid


def test_actions_escalate_in_declared_order() -> None:
    assert [a.value for a in sorted(Action, key=lambda a: a.rank)] == [
        "none", "configure", "reset_gpu", "restart_service", "reboot", "reseat_inspect", "rma"]


def test_a_row_refines_its_class_from_the_finding_itself() -> None:
    # gpu.xid follows NVIDIA's Xid catalog (facts/xid.py): 79 (fallen off the bus) asks for a reboot,
    # 13 (an application's graphics exception) for nothing on the host, 48 (DBE) for a GPU reset
    assert action_of(_finding("gpu.xid", "Xid 79, GPU has fallen off the bus (1 in this boot)")) is Action.REBOOT
    assert action_of(_finding("gpu.xid", "Xid 13, graphics engine exception")) is Action.NONE
    assert action_of(_finding("gpu.xid", "Xid 48, double bit ECC error")) is Action.RESET_GPU
    # NVML's recovery action decides between a GPU reset and a node reboot
    assert action_of(_finding("gpu.reset_required", actual="GPU_RESET")) is Action.RESET_GPU
    assert action_of(_finding("gpu.reset_required", actual="NODE_REBOOT")) is Action.REBOOT
    assert action_of(_finding("nccl.error", actual="hang")) is Action.REBOOT
    assert action_of(_finding("nccl.error", actual=5)) is Action.CONFIGURE
    # a stored id a newer fleetprobe raised is to be looked at, never "nothing to do"
    assert action_of(_finding("gpu.some_future_check")) is Action.RESEAT_INSPECT


def _doc_actions() -> dict[str, str]:
    section = DOC.read_text().split("## Action classes", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `([a-z0-9_.]+)` \| `([a-z_]+)` \|", section, re.MULTILINE)}


def test_the_catalog_lists_every_id_with_its_action_class() -> None:
    documented = _doc_actions()
    assert documented == {fid: rule.action.value for fid, rule in ACTIONS.items()}
