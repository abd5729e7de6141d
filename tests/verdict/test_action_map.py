"""One action vocabulary, mapped to the ones operators already use (issue 46, item 3): every rule
has an action class, every class a row in every vocabulary of verdict/action_map.py, each name
one that vocabulary defines, each vocabulary its source; docs/findings.md shows the same table."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.verdict.action_map import ACTION_MAP, VOCABULARIES, Mapped
from orchestrator.verdict.actions import ACTIONS, Action, Rule

ROOT = Path(__file__).resolve().parents[2]

# The names each vocabulary defines (the sources in VOCABULARIES); a mapping to any other is a typo.
KNOWN = {
    "nvml": {"NONE", "GPU_RESET", "NODE_REBOOT", "DRAIN_P2P", "DRAIN_AND_RESET"},
    "xid": {"IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT", "CHECK_MECHANICALS", "UPDATE_SW"},
    "gpud": {"IGNORE_NO_ACTION_REQUIRED", "REBOOT_SYSTEM", "HARDWARE_INSPECTION", "CHECK_USER_APP_AND_GPU"},
    "nvsentinel": {"NONE", "COMPONENT_RESET", "CONTACT_SUPPORT", "RUN_FIELDDIAG", "RESTART_VM", "RESTART_BM",
                   "REPLACE_VM"},
    "health_validation": {"drain", "reset_gpu", "restart_os", "service_required"},
}


def gaps(rules: Mapping[str, Rule], table: Mapping[Action, Mapping[str, Mapped]]) -> list[str]:
    """What keeps the catalog from speaking every vocabulary: a rule without an action class, a
    class (the rules' or any other) without a row, a row without a vocabulary, a mapping to no
    name without its reason, a name the vocabulary does not define."""
    out = [f"{fid}: no action class" for fid, rule in rules.items() if not isinstance(rule.action, Action)]
    for action in Action:
        row = table.get(action)
        if row is None:
            out.append(f"{action.value}: no mapping")
            continue
        for v in VOCABULARIES:
            m = row.get(v.key)
            if m is None:
                out.append(f"{action.value}: nothing in {v.key}")
            elif m.name is None and not m.note.strip():
                out.append(f"{action.value}: no {v.key} name and no reason why")
            elif m.name is not None and m.name not in KNOWN[v.key]:
                out.append(f"{action.value}: {m.name!r} is no {v.key} name")
    return out


def test_every_rule_has_an_action_and_every_action_a_mapping_in_every_vocabulary() -> None:
    assert gaps(ACTIONS, ACTION_MAP) == []
    assert {v.key for v in VOCABULARIES} == set(KNOWN)
    assert all(v.name and v.source.startswith("https://") for v in VOCABULARIES)


@pytest.mark.parametrize("damage", ["drop_row", "drop_vocabulary", "typo", "no_reason", "rule_without_action"])
def test_the_check_fails_on_each_kind_of_gap(damage: str) -> None:
    table = {a: dict(row) for a, row in ACTION_MAP.items()}
    rules = dict(ACTIONS)
    if damage == "drop_row":
        del table[Action.RESET_GPU]
    elif damage == "drop_vocabulary":
        del table[Action.REBOOT]["nvsentinel"]
    elif damage == "typo":
        table[Action.RMA]["gpud"] = Mapped("HARDWARE_INSPECT")
    elif damage == "no_reason":
        table[Action.NONE]["health_validation"] = Mapped(None)
    else:
        rules["gpu.lost"] = replace(rules["gpu.lost"], action="reboot")  # type: ignore[arg-type]
    assert len(gaps(rules, table)) == 1


def test_escalation_is_monotonic_where_a_vocabulary_escalates() -> None:
    # Health Validation's chain: drain -> reset GPU -> restart OS -> service; a more disruptive
    # class never maps to an earlier step of it
    chain = ["reset_gpu", "restart_os", "service_required"]
    steps = [chain.index(n) for a in sorted(Action, key=lambda a: a.rank)
             if (n := ACTION_MAP[a]["health_validation"].name) in chain]
    assert steps == sorted(steps)


def test_the_catalog_shows_the_table() -> None:
    doc = (ROOT / "docs" / "findings.md").read_text()
    section = doc.split("## Action vocabularies", 1)[1].split("\n## ", 1)[0]
    rows = {m.group(1): [c.strip() for c in m.group(2).split("|")]
            for m in re.finditer(r"^\| `([a-z_]+)` \|(.*)\|$", section, re.MULTILINE)}
    assert set(rows) == {a.value for a in Action}
    for action, row in ACTION_MAP.items():
        shown = [c.split(" ")[0].strip("`") for c in rows[action.value]]
        assert shown == [m.name or "-" for m in (row[v.key] for v in VOCABULARIES)], action
    for v in VOCABULARIES:
        assert v.source in section
