"""Edge cases of the faster normalizers and p2p check paths: the per-host index maps and
symmetric level computation must answer exactly what the straightforward definitions answer."""

from __future__ import annotations

from typing import Any

from orchestrator.facts.normalize import pcie, topology
from orchestrator.verdict.checks import p2p as p2p_checks


def test_topology_merge_with_a_bus_id_listed_twice_keeps_the_last_string_cell_per_pair() -> None:
    # Not what the pcie normalizer writes, but facts can come from elsewhere: the merge must read
    # such a matrix as a mapping keyed by bus-id pairs (last string cell wins), not by position.
    levels = {"order": ["A", "B", "A"], "labels": ["GPU0", "GPU1", "NIC0"],
              "matrix": [["X", "PIX", None], ["PIX", "X", "SYS"], ["NODE", None, "X"]]}
    out = topology.merge(None, None, {"levels": levels, "gpus": ["A", "B"], "nics": []})
    assert [d["bus_id"] for d in out["devices"]] == ["A", "B", "A"]
    assert out["matrix"] == [["X", "PIX", None], ["SYS", "X", "SYS"], [None, "PIX", "X"]]
    assert out["source"][0][1] == "pcie" and out["source"][0][2] is None


def test_topology_merge_prefers_nvlink_then_nvml_then_pcie() -> None:
    levels = {"order": ["a", "b", "n"], "labels": ["GPU0", "GPU1", "NIC0"],
              "matrix": [["X", "PHB", "PIX"], ["PHB", "X", "SYS"], ["PIX", "SYS", "X"]]}
    gpus = {"order": ["a", "b"], "list": [], "levels": [["X", "NODE"], ["NODE", "X"]]}
    nvlink = {"order": ["a", "b"], "nv": [[None, 4], [None, None]]}
    out = topology.merge(gpus, nvlink, {"levels": levels, "gpus": ["a", "b"], "nics": ["n"]})
    assert out["matrix"] == [["X", "NV4", "PIX"], ["NODE", "X", "SYS"], ["PIX", "SYS", "X"]]
    assert out["source"] == [["self", "nvlink", "pcie"], ["nvml", "self", "pcie"], ["pcie", "pcie", "self"]]


def _dev(bdf: str, chain: list[str], role: str | None = None, hb: str = "pci0000:00", numa: int | None = 0,
         parent_role: str | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"bdf": bdf, "chain": chain, "parent": chain[-1] if chain else None, "host_bridge": hb,
                         "numa": numa}
    if role:
        d["_role"] = role
    return d


def test_level_matrix_is_level_of_every_pair() -> None:
    # root port r, a two-level switch (u1 -> d1 -> u2 -> d2/d3), devices on both levels, one on
    # another host bridge and NUMA node, one with no host bridge
    devs = {b: d for b, d in (
        ("r", _dev("r", [], "root")),
        ("u1", _dev("u1", ["r"], "usp")), ("d1", _dev("d1", ["r", "u1"], "dsp")),
        ("d4", _dev("d4", ["r", "u1"], "dsp")),
        ("u2", _dev("u2", ["r", "u1", "d1"], "usp")),
        ("d2", _dev("d2", ["r", "u1", "d1", "u2"], "dsp")), ("d3", _dev("d3", ["r", "u1", "d1", "u2"], "dsp")),
        ("g0", _dev("g0", ["r", "u1", "d1", "u2", "d2"])), ("g1", _dev("g1", ["r", "u1", "d1", "u2", "d3"])),
        ("g2", _dev("g2", ["r", "u1", "d4"])), ("g3", _dev("g3", ["r"])), ("g4", _dev("g4", [])),
        ("g5", _dev("g5", [], hb="pci0000:80", numa=1)), ("g6", _dev("g6", [], hb=None)),  # type: ignore[arg-type]
    )}
    order = ["g0", "g1", "g2", "g3", "g4", "g5", "g6"]
    m = pcie._level_matrix(devs, order, 2)
    assert m == [[pcie.level(devs, a, b, 2) for b in order] for a in order]
    assert m[0][:6] == ["X", "PIX", "PXB", "PXB", "PHB", "SYS"]  # g3: two switches up to the root port
    assert m[2][3] == "PIX" and m[3][4] == "PHB"
    assert m[0][6] is None and m[6][6] == "X"


def test_pair_link_indexes_the_first_gpu_with_a_bus_id_and_never_a_null_one() -> None:
    topo = {"devices": [{"bus_id": None}, "not a device", {"bus_id": "b"}, {"bus_id": "a"}, {"bus_id": "a"}],
            "matrix": [["X", "NV1", "NV2", "NV3"], ["NV1", "X", "NV5", "PIX"], ["NV2", "NV5", "X", "SYS"],
                       ["NV3", "PIX", "SYS", "X"]]}
    # positions count dict devices only: b is row 1, a is row 2 (its first occurrence)
    def pair_link(facts: dict[str, Any], a: Any, b: Any, p2p: dict[str, Any]) -> p2p_checks.Link:
        return p2p_checks._HostLinks(facts, p2p).link(a, b)

    link = pair_link({"topology": topo}, "a", "b", {})
    assert (link.kind, link.nv, link.level, link.source) == ("nvlink", 5, "NV5", "topology")
    assert pair_link({"topology": topo}, None, "b", {}).source == "none"
    p2p = {"order": ["x", "y", "x"], "nvml_nvlink": [[None, False, None], [True, None, None], [None, None, None]]}
    assert pair_link({}, "y", "x", p2p).kind == "nvlink"
    assert pair_link({}, "x", "y", p2p).kind == "pcie"


def test_gpu_model_keys_are_unique() -> None:
    # check_p2p judges NVLink pairs once per (model key, link count) on a host
    from orchestrator.facts import gpu_models

    keys = [m.key for m in gpu_models.MODELS]
    assert len(keys) == len(set(keys))
