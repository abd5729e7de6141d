"""The HTML report's P2P heat map shows measured / the floor the p2p check judged against.

The report once derived its own floor and took any p2p finding's expected value for a pair, so
the demo's slow pair (12 GB/s against the 335 GB/s H100 floor) read "43 %": the staging estimate
of p2p.slower_than_host.  Now both read verdict/checks/p2p.py:pair_floors.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.verdict.checks.p2p import BANDWIDTH_LOW, pair_floors
from tests.present.test_report import host_section, parse, pictures
from tests.support.judged import report as render_report
from tests.verdict.test_verdict_demo import run_cli

SLOW_HOST = "dgx-h100-07"  # replays dgx-h100--p2p-slow: GPU2<->GPU5 copies at 12 GB/s


def test_heat_map_percentages_are_measured_over_the_checks_floor(tmp_path: Path) -> None:
    _, fleet, err = run_cli(["-l", SLOW_HOST, "-p", "premigration"], tmp_path / "run")
    assert fleet is not None, err
    host = next(h for h in fleet["hosts"] if h["name"] == SLOW_HOST)
    low = [f for f in fleet["findings"] if f["host"] == SLOW_HOST and f["id"] == BANDWIDTH_LOW]
    assert sorted(f["subject"] for f in low) == ["GPU2->GPU5 (0000:3a:00.0 -> 0000:ab:00.0)",
                                                 "GPU5->GPU2 (0000:ab:00.0 -> 0000:3a:00.0)"]
    assert all(f["expected"] == 335.0 for f in low)
    # another finding on the same pair carries another expected value: it must not be shown as the floor
    assert any(f["id"] == "p2p.slower_than_host" and f["expected"] != 335.0 for f in fleet["findings"]
               if f["host"] == SLOW_HOST)

    facts = host["facts"]
    floors = pair_floors(facts)
    order = [b.lower() for b in facts["p2p"]["order"]]
    measured = facts["p2p"]["matrices"]["ce_gbps"]
    svg = pictures(host_section(parse(render_report(fleet)), SLOW_HOST), "p2p")[0]
    cells = svg.find_all("g", cls="cell")
    assert len(cells) == len(order) ** 2
    checked = 0
    for idx, cell in enumerate(cells):
        a, b = divmod(idx, len(order))
        if a == b:
            continue
        floor = floors[(order[a], order[b])]
        texts = [t.text() for t in cell.find_all("text")]
        assert texts == [f"{measured[a][b]:g}", f"{measured[a][b] / floor * 100:.0f}%"], (a, b)
        checked += 1
    assert checked == len(order) * (len(order) - 1)
    slow = cells[2 * len(order) + 5]
    assert [t.text() for t in slow.find_all("text")] == ["12", "4%"] and "hm-bad" in slow.classes
