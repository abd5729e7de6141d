"""Terminal text fitted to the terminal (issue 16, item 5): present/terminal/width.py and the
hosts and findings tables that use it."""

from __future__ import annotations

import io
import sys

import pytest

from orchestrator.present.terminal import width as tw
from orchestrator.present.terminal.findings import findings_table
from orchestrator.present.terminal.hosts import hosts_table
from orchestrator.verdict.findings import Finding, fault
from orchestrator.verdict.result import FleetResult
from tests.support.judged import judged

REASON = ("gpu07 (10.0.0.7:22): connection refused; is sshd running there and is the port right "
          "(ansible_port)? (after 2 retries)")
MESSAGE = ("ACS RR/CR enabled on switch port 0000:06:00.0 above GPU0 (0000:07:00.0): peer-to-peer traffic "
           "is redirected through the root complex, which halves the bandwidth of every pair below it")


def _fleet() -> FleetResult:
    host = {"os": "Red Hat Enterprise Linux 9.4 (Plow)", "kernel": "5.14.0-427.13.1.el9_4.x86_64",
            "board": {"vendor": "Lenovo", "model": "SB27B09955"}, "driver": {"version": "550.54.15"}}
    gpus = {"list": [{"name": "NVIDIA H100 80GB HBM3"}] * 7 + [{"name": None}]}
    return judged({"hosts": [
        {"name": "gpu01", "outcome": "ok", "reason": "", "probes": {}, "facts": {"host": host, "gpus": gpus},
         "class": "8xH100-SXM-NV18-8NIC-PIX"},
        {"name": "gpu07", "outcome": "unreachable", "reason": REASON, "probes": {}, "facts": {}, "class": None},
    ]})


def _finding(i: int) -> Finding:
    return fault("pcie.acs.enabled", f"gpu{i:02d}", "0000:06:00.0", MESSAGE,
                 hint="boot with pci=disable_acs_redir=<ports> " * 4)


@pytest.mark.parametrize("columns", [60, 80, 132])
def test_tables_fit_and_keep_every_word(columns: int) -> None:
    for text in (hosts_table(_fleet(), columns), findings_table([_finding(1), _finding(2)], width=columns)):
        assert max(len(ln) for ln in text.splitlines()) <= columns, text
    flat = " ".join(hosts_table(_fleet(), columns).split())
    assert "is sshd running there and is the port right (ansible_port)? (after 2 retries)" in flat
    flat = " ".join(findings_table([_finding(1)], width=columns).split())
    assert "halves the bandwidth of every pair below it" in flat


def test_no_width_cuts_nothing() -> None:
    hosts = hosts_table(_fleet(), None)
    assert "Red Hat Enterprise Linux 9.4 (Plow)" in hosts and REASON in hosts
    table = findings_table([_finding(1)])
    assert MESSAGE in table  # one line, whole (it was cut at 110 characters)


def test_unknown_gpu_model_is_named_unknown() -> None:
    assert "7x NVIDIA H100 80GB HBM3, 1x unknown model" in hosts_table(_fleet(), None)
    assert "None" not in hosts_table(_fleet(), None)


def test_width_comes_from_the_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a tty: no limit
    assert tw.terminal_width() is None
    monkeypatch.setenv("COLUMNS", "100")
    assert tw.terminal_width() == 100


def test_wrap() -> None:
    assert tw.wrap("a b c", None, "  hint: ") == "  hint: a b c"
    lines = tw.wrap("word " * 30, 40, "  hint: ").splitlines()
    assert all(len(ln) <= 40 for ln in lines) and lines[1].startswith("        word")


def test_gpu_view_fits_by_dropping_what_is_missed_least() -> None:
    from orchestrator.present.terminal.gpus import view_gpus
    from tests.verdict.test_verdict_demo import recorded_facts

    facts = recorded_facts("dgx-h100-04")
    wide = view_gpus(facts["gpus"], host="dgx-h100-04", facts=facts)
    narrow = view_gpus(facts["gpus"], host="dgx-h100-04", facts=facts, width=80)
    assert "uuid" in wide.splitlines()[1] and max(len(ln) for ln in wide.splitlines()) > 80
    assert max(len(ln) for ln in narrow.splitlines()) <= 80
    head = narrow.splitlines()[1].split()
    assert head[:3] == ["#", "bus", "id"] and "NVLink" in head and "health" in head and "uuid" not in head
    assert "16/18" in narrow and "0000:3a:00.0" in narrow
