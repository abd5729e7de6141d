"""Kernel-log lines as operators published them become the events they describe (facts/normalize/kmsg.py).

The lines and their provenance: tests/fixtures/kmsg/published_lines.txt and SOURCES.md.  Each line
is followed by the event it must give (`=> kind field=value ...`) or `=> none`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts import xid
from orchestrator.facts.normalize import kmsg

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg" / "published_lines.txt"


def _cases() -> list[tuple[str, str]]:
    rows = [r for r in FIXTURE.read_text().splitlines() if r.strip() and not r.startswith("#")]
    assert len(rows) % 2 == 0
    return [(rows[i], rows[i + 1]) for i in range(0, len(rows), 2)]


def _value(text: str) -> Any:
    if text == "None":
        return None
    return int(text) if text.isdigit() else text


@pytest.mark.parametrize(("line", "want"), _cases(), ids=lambda v: v[:50])
def test_published_line_gives_its_event(line: str, want: str) -> None:
    assert want.startswith("=> ")
    spec = want[3:]
    ev = kmsg.parse_line(line, 12.5)
    if spec == "none":
        assert ev is None, ev
        return
    assert ev is not None, line
    kind, _, rest = spec.partition(" ")
    assert ev["kind"] == kind
    # "k=v" pairs; a value may contain spaces ("error_type=Physical Layer")
    pairs: list[list[str]] = []
    for tok in rest.split(" ") if rest else []:
        if "=" in tok and tok.split("=", 1)[0].isidentifier():
            pairs.append(tok.split("=", 1))
        else:
            pairs[-1][1] += " " + tok
    for key, value in pairs:
        assert ev.get(key) == _value(value), (key, ev)  # type: ignore[misc]


def test_event_key_names_kind_time_device_and_code() -> None:
    ev = kmsg.parse_line("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", 73412.2203171)
    assert ev is not None and ev["key"] == "xid|73412.220|0000:2b:00.0|79"
    again = kmsg.parse_line("NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", 73412.2203171)
    assert again == ev  # pure: one line, one event


def test_normalize_reports_why_the_log_was_unreadable() -> None:
    facts = kmsg.normalize({"readable": False, "attempts": [
        {"source": "journalctl", "error": "journalctl shows no kernel messages to this user"},
        {"source": "kmsg", "error": "/dev/kmsg is readable by root only (kernel.dmesg_restrict)"}],
        "lines": []})
    assert facts["readable"] is False and facts["events"] == []
    assert "journalctl" in str(facts["unreadable_reason"]) and "dmesg_restrict" in str(facts["unreadable_reason"])


def test_normalize_tolerates_garbage_lines() -> None:
    facts = kmsg.normalize({"readable": True, "source": "kmsg", "lines": [None, 3, {"msg": 5}, {"t": "x", "msg":
                            "NVRM: Xid (PCI:0000:cb:00): 31, pid=1, name=a, Ch 00000001, intr 10000000"}]})
    assert [e["code"] for e in facts["events"]] == [31]
    assert facts["events"][0]["t"] is None


def test_xid_table_actions_and_line_severity() -> None:
    assert set(a.action for a in xid.XIDS.values()) <= set(xid.ACTIONS)
    assert xid.action_of(79, "GPU has fallen off the bus.") == "reboot"
    assert xid.action_of(48, "DBE") == "reset"
    assert xid.action_of(13, "Graphics Exception") == "application" and xid.lookup(13).burst  # type: ignore[union-attr]
    assert xid.action_of(145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13") == "ignore"
    assert xid.action_of(145, "RLW_RXPIPE Fatal XC0 i0 Link 13") == "reset"
    assert xid.action_of(154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)") == "reboot"
    assert xid.action_of(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)") == "reset"
    assert xid.action_of(9999, "x") is None
