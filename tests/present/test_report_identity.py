"""The report's host card reads facts["host"] as normalize/host.py writes it (it used to read
`host.dmi` / `host.nvidia_driver`, keys nobody writes, so board, BIOS and serials were empty)."""

from __future__ import annotations

import html

from orchestrator.present.report.model import build_fleet_view, read_identity
from tests.support.judged import judged
from tests.support.judged import report as render_report
from tests.verdict.test_verdict_demo import demo_fleet, recorded_facts


def test_demo_host_identity_has_board_bios_serial_driver_os() -> None:
    ident = dict(read_identity(recorded_facts("dgx-h100-04")))
    assert ident["System"] == "NVIDIA DGXH100"
    assert ident["Board"] == "NVIDIA DGXH100"
    assert ident["BIOS"] == "American Megatrends International LLC. 1.1.3 03/14/2024"
    assert ident["Serial"] == "4826523432648"
    assert ident["Board serial"] == "1099540240286"
    assert ident["Driver"] == "550.54.15"
    assert ident["OS"] == "Ubuntu 22.04.4 LTS"
    assert ident["Virtualization"] == "none"


def test_serial_that_needs_root_says_so() -> None:
    facts = recorded_facts("dgx-h100-04")
    facts["host"]["board"]["system_serial"] = {"unknown": "needs root"}
    assert dict(read_identity(facts))["Serial"] == "unknown (needs root)"


def test_demo_report_shows_every_hosts_board_bios_and_the_detailed_hosts_serials() -> None:
    _rc, fleet = demo_fleet()
    page = html.unescape(render_report(fleet))
    view = build_fleet_view(judged(fleet))
    detailed = {h.name for c in view.classes for h in c.hosts if h.detailed} | \
        {h.name for h in view.unclassified if h.detailed}
    assert detailed
    pages = [h for c in view.classes for h in c.hosts] + view.unclassified
    assert all("None" not in value for h in pages for _key, value in h.identity)
    for host in fleet["hosts"]:
        board = (host["facts"].get("host") or {}).get("board") or {}
        if board.get("model"):  # a VM's DMI has no board: nothing to show, and no "None"
            assert f"{board['vendor']} {board['model']}" in page, host["name"]  # member tables list every host
        assert f"{board['bios_vendor']} {board['bios_version']}" in page, host["name"]
        if host["name"] in detailed and isinstance(board.get("system_serial"), str):
            assert board["system_serial"] in page, host["name"]
