"""Drift between two recorded runs (hand-built fleet.json dicts in the architecture's shape)."""

from __future__ import annotations

import copy

import pytest

from orchestrator.present.terminal.drift import render_diff
from orchestrator.verdict import drift
from orchestrator.verdict.changes import FleetDiff
from tests.support.judged import judged


def diff_fleets(old: object, new: object, **kw: float) -> FleetDiff:
    """Drift between two fleet.json documents, as the verdict reads them."""
    return drift.diff_fleets(judged(old), judged(new), **kw)

BUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]


def host(name: str, n_gpus: int = 4, links_down: tuple[tuple[int, int], ...] = (), outcome: str = "ok",
         probes: tuple[str, ...] = ("host", "pcie", "nvml", "nvlink", "topology_dummy"), cls: str = "A",
         p2p: float | None = None) -> dict:
    gpus = [{"index": i, "uuid": f"GPU-{name}-{i}", "bus_id": BUS[i], "name": "NVIDIA H100 80GB HBM3"}
            for i in range(n_gpus)]
    nvlink = {"order": [g["bus_id"] for g in gpus], "gpus": [{"bus_id": g["bus_id"], "links": [
        {"link": k, "state": "down" if (g["index"], k) in links_down else "up"} for k in range(2)]} for g in gpus]}
    labels = [g["bus_id"] for g in gpus]
    matrix = [["X" if i == j else "NV2" for j in range(n_gpus)] for i in range(n_gpus)]
    devices = [{"name": f"GPU{i}", "kind": "gpu", "bus_id": b} for i, b in enumerate(labels)]
    facts: dict = {"gpus": {"order": labels, "list": gpus}, "nvlink": nvlink,
                   "topology": {"devices": devices, "matrix": matrix}, "pcie": {"gpus": labels}}
    probe_rec = {p: {"outcome": "ok"} for p in probes if p != "topology_dummy"}
    if p2p is not None:
        facts["p2p"] = {"order": labels, "ce_unidir_gbps": [[None if i == j else p2p for j in range(n_gpus)]
                                                          for i in range(n_gpus)]}
        probe_rec["p2p"] = {"outcome": "ok"}
    if outcome == "unreachable":
        facts, probe_rec = {}, {p: {"outcome": "unreachable"} for p in probe_rec}
    return {"name": name, "address": name, "groups": ["all"], "outcome": outcome,
            "reason": "connection refused" if outcome == "unreachable" else None,
            "probes": probe_rec, "facts": facts, "fingerprint": None, "class": cls}


def finding(fid: str, h: str, subject: str) -> dict:
    return {"id": fid, "severity": "fail", "kind": "fault", "host": h, "subject": subject,
            "message": f"{fid} on {subject}", "expected": None, "actual": None, "evidence": [], "hint": ""}


def fleet(run_id: str, hosts: list[dict], findings: list[dict]) -> dict:
    return {"schema_version": 1, "run": {"id": run_id, "inventory": ["fleet.yaml"]},
            "summary": {}, "hosts": hosts, "classes": [], "findings": findings}


@pytest.fixture
def pair():
    old = fleet("r1", [host("gpu01"), host("gpu02"), host("gpu03"), host("gpu04")],
                [finding("sensor.fan.zero_rpm", "gpu02", "GPU1"), finding("pcie.link.downgraded", "gpu03", BUS[0])])
    new = fleet("r2", [host("gpu01", n_gpus=3), host("gpu02", links_down=((1, 0),)), host("gpu03"),
                       host("gpu05")],
                [finding("sensor.fan.zero_rpm", "gpu02", "GPU1"), finding("nvlink.link.down", "gpu02", "GPU1 link 0")])
    return old, new


def test_lost_gpu_downed_link_new_and_resolved_finding(pair):
    old, new = pair
    d = diff_fleets(old, new)
    got = sorted((c.host, c.kind, c.subject) for c in d.changes)
    assert got == sorted([
        ("gpu01", "gpu.lost", f"GPU3 {BUS[3]}"),  # its links are folded into this one line
        ("gpu02", "link.down", f"{BUS[1]} link 0"),
        ("gpu02", "finding.new", "nvlink.link.down GPU1 link 0"),
        ("gpu03", "finding.resolved", f"pcie.link.downgraded {BUS[0]}"),
    ])
    # hosts in one run only are listed, not compared (one line each way, not one change per host)
    assert (d.not_in_new, d.not_in_old) == (["gpu04"], ["gpu05"])
    lost = next(c for c in d.changes if c.kind == "gpu.lost")
    assert lost.old == "GPU-gpu01-3"
    down = next(c for c in d.changes if c.host == "gpu02" and c.kind == "link.down")
    assert (down.old, down.new) == ("up", "down")
    assert d.old_run == "r1" and d.new_run == "r2"
    text = render_diff(d)
    assert "drift r1 -> r2:" in text
    assert "- GPU lost: GPU3 0000:5d:00.0 (NVIDIA H100 80GB HBM3, GPU-gpu01-3); its 2 NVLink(s) with it" in text
    assert "! new finding nvlink.link.down GPU1 link 0" in text
    assert "+ resolved finding pcie.link.downgraded 0000:18:00.0" in text
    assert "  1 host(s) not in this run: gpu04\n" in text and "  1 host(s) not in the baseline: gpu05\n" in text
    assert text.rstrip().endswith("on 3 host(s): finding.new 1, finding.resolved 1, gpu.lost 1, link.down 1")


def test_identical_runs_have_no_changes(pair):
    old, _ = pair
    d = diff_fleets(old, copy.deepcopy(old))
    assert not d and "no changes" in render_diff(d)


def test_unreachable_host_reports_reachability_only():
    old = fleet("r1", [host("a")], [finding("x.y", "a", "GPU0")])
    new = fleet("r2", [host("a", outcome="unreachable")], [])
    d = diff_fleets(old, new)
    assert [(c.kind, c.new) for c in d.changes] == [("host.unreachable", "unreachable")]
    assert "connection refused" in d.changes[0].message
    back = diff_fleets(new, old)
    assert [c.kind for c in back.changes] == ["host.recovered"]


def test_sections_whose_probe_did_not_run_are_not_compared():
    old = fleet("r1", [host("a")], [])
    quick = host("a", n_gpus=2, probes=("host", "nvml"))
    quick["facts"].pop("nvlink")
    quick["facts"].pop("pcie")
    d = diff_fleets(old, fleet("r2", [quick], []))
    # nvml ran both times, so the two missing GPUs count; links were not probed, so no link.down
    # (the level matrix of the two GPUs left is unchanged)
    assert sorted((c.kind, c.subject) for c in d.changes) == [("gpu.lost", f"GPU2 {BUS[2]}"),
                                                               ("gpu.lost", f"GPU3 {BUS[3]}")]


def test_moved_and_replaced_gpus_and_class_and_levels():
    old = fleet("r1", [host("a")], [])
    new_h = host("a", cls="B")
    g = new_h["facts"]["gpus"]["list"]
    g[0]["bus_id"] = "0000:99:00.0"  # same board, other slot
    g[1]["uuid"] = "GPU-other"  # other board, same slot
    new_h["facts"]["topology"]["matrix"][0][2] = new_h["facts"]["topology"]["matrix"][2][0] = "SYS"
    d = diff_fleets(old, fleet("r2", [new_h], []))
    kinds = {c.kind: c for c in d.changes}
    assert set(kinds) == {"gpu.moved", "gpu.replaced", "class.changed", "level.changed"}
    assert (kinds["gpu.moved"].old, kinds["gpu.moved"].new) == (BUS[0], "0000:99:00.0")
    assert (kinds["gpu.replaced"].old, kinds["gpu.replaced"].new) == ("GPU-a-1", "GPU-other")
    assert (kinds["class.changed"].old, kinds["class.changed"].new) == ("A", "B")
    lv = kinds["level.changed"]
    assert (lv.subject, lv.old, lv.new) == (f"{BUS[0]} <-> {BUS[2]}", "NV2", "SYS")
    assert sum(1 for c in d.changes if c.kind == "level.changed") == 1  # symmetric pair reported once


def test_bandwidth_beyond_tolerance_only():
    old = fleet("r1", [host("a", p2p=300.0)], [])
    small = fleet("r2", [host("a", p2p=280.0)], [])  # -6.7%: within 10%
    assert not diff_fleets(old, small)
    big = fleet("r3", [host("a", p2p=12.0)], [])
    d = diff_fleets(old, big)
    assert {c.kind for c in d.changes} == {"bandwidth.dropped"}
    assert len(d.changes) == 12  # every ordered pair of 4 GPUs
    c = d.changes[0]
    assert c.subject == f"ce_unidir_gbps[{BUS[0]}->{BUS[1]}]" and (c.old, c.new) == (300.0, 12.0)
    assert "-96%" in c.message
    assert not diff_fleets(old, big, bw_tolerance=0.99)
    with pytest.raises(ValueError):
        diff_fleets(old, big, bw_tolerance=-1)


def test_render_strips_terminal_escapes_from_host_text():
    old = fleet("r1", [], [])
    new = fleet("r2", [host("evil\x1b[2J\x1b]0;pwned\x07")], [])
    text = render_diff(diff_fleets(old, new))
    assert "\x1b" not in text and "\x07" not in text


def test_gpu_fallen_off_the_bus_and_unknown_link_state():
    old = fleet("r1", [host("a")], [])
    new_h = host("a")
    new_h["facts"]["gpus"]["list"][2]["lost"] = True
    new_h["facts"]["nvlink"]["gpus"][0]["links"][0]["state"] = None  # NVML could not tell: not "down"
    d = diff_fleets(old, fleet("r2", [new_h], []))
    assert [(c.kind, c.subject) for c in d.changes] == [("gpu.lost", f"GPU2 {BUS[2]}")]
    assert "GPU_IS_LOST" in d.changes[0].message
    assert [c.kind for c in diff_fleets(fleet("r2", [new_h], []), old).changes] == ["gpu.gained"]


def test_pcie_bus_list_is_compared_when_nvml_did_not_run():
    old = fleet("r1", [host("a", probes=("host", "pcie"))], [])
    new = fleet("r2", [host("a", n_gpus=3, probes=("host", "pcie"))], [])
    d = diff_fleets(old, new)
    assert [(c.kind, c.subject, c.old) for c in d.changes] == [("gpu.lost", f"GPU3 {BUS[3]}", None)]


def test_p2p_records_are_matched_by_bus_ids_not_position():
    from orchestrator.facts.read import bandwidths, p2p_min_gbps

    def p2p_host(pairs: list[tuple[int, int, float]]) -> dict:
        h = host("a")
        h["probes"]["p2p"] = {"outcome": "ok"}
        h["facts"]["p2p"] = {
            "gpus": [{"index": i, "bus_id": b, "h2d_gbps": 50.0} for i, b in enumerate(BUS)],
            "pairs": [{"src": a, "dst": b, "src_bus_id": BUS[a], "dst_bus_id": BUS[b], "ce_gbps": v,
                       "sm_read_gbps": v * 0.9} for a, b, v in pairs],
            "bidirectional": [{"a": 0, "b": 1, "a_bus_id": BUS[0], "b_bus_id": BUS[1], "total_gbps": 700.0}],
            "all_to_host": {"d2h_total_gbps": 100.0},
        }
        return h

    old_h = p2p_host([(0, 1, 350.0), (1, 0, 352.0)])
    new_h = p2p_host([(1, 0, 351.0), (0, 1, 20.0)])  # other order, one pair collapsed
    bw = bandwidths(new_h["facts"])
    assert bw is not None
    assert bw[f"pairs[{BUS[0]}->{BUS[1]}].ce_gbps"] == 20.0
    assert bw[f"bidirectional[{BUS[0]}<->{BUS[1]}].total_gbps"] == 700.0
    assert bw[f"gpus[{BUS[2]}].h2d_gbps"] == 50.0
    assert p2p_min_gbps(old_h["facts"]) == 350.0  # copy engine, one way: not the sm figure, not host
    d = diff_fleets(fleet("r1", [old_h], []), fleet("r2", [new_h], []))
    assert [(c.kind, c.subject) for c in d.changes] == [
        ("bandwidth.dropped", f"pairs[{BUS[0]}->{BUS[1]}].ce_gbps"),
        ("bandwidth.dropped", f"pairs[{BUS[0]}->{BUS[1]}].sm_read_gbps"),
    ]
