"""build_fleet pauses the cyclic collector only while it runs, and fleet.json written by the
streaming writer reads back as the document that was built."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store import atomic
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "orchestrator" / "demo" / "recordings"


def _inputs(names: list[str]) -> list[HostInput]:
    out = []
    for name in names:
        probes, data = {}, {}
        for path in sorted((RECORDINGS / name).glob("*.json")):
            env = json.loads(path.read_text())
            probes[env["probe"]] = {"outcome": "ok" if env["status"] == "ok" else env["status"], "reason": ""}
            data[env["probe"]] = env["data"]
        out.append(HostInput(name=name, address="127.0.0.1", groups=["demo"], probes=probes, data=data))
    return out


RUN = RunMeta(id="t", probes=[])


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        fleet = build_fleet(RUN, _inputs(["dgx-h100-01"]), lambda h: Expectations()).to_document()
        assert fleet["summary"]["hosts"] == 1
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_gc_is_restored_when_a_callback_raises() -> None:
    assert gc.isenabled()

    def broken(h: HostInput) -> Expectations:
        raise RuntimeError("inventory lookup failed")

    with pytest.raises(RuntimeError):
        build_fleet(RUN, _inputs(["dgx-h100-01"]), broken).to_document()
    assert gc.isenabled()


def test_written_fleet_reads_back_equal(tmp_path: Path) -> None:
    names = sorted(p.name for p in RECORDINGS.iterdir() if p.is_dir())
    fleet = build_fleet(RUN, _inputs(names), lambda h: Expectations()).to_document()
    assert fleet["summary"]["hosts"] == len(names) > 20
    path = atomic.write_json(tmp_path / "fleet.json", fleet)
    assert json.loads(path.read_text()) == json.loads(json.dumps(fleet, default=str))
    assert b"\n " not in path.read_bytes()  # compact: the big file is not indented


def test_normalizers_repeat_identically() -> None:
    """The parse caches must not leak one host's facts into another's: the same input gives the
    same facts, and facts of different hosts are distinct objects that can be changed alone."""
    a = build_fleet(RUN, _inputs(["dgx-h100-01", "dgx-h100-02"]), lambda h: Expectations()).to_document()
    b = build_fleet(RUN, _inputs(["dgx-h100-01", "dgx-h100-02"]), lambda h: Expectations()).to_document()
    assert json.dumps(a, default=str) == json.dumps(b, default=str)
    d1 = a["hosts"][0]["facts"]["pcie"]["devices"][0]
    d2 = a["hosts"][1]["facts"]["pcie"]["devices"][0]
    assert d1 == d2 and d1 is not d2 and d1["chain"] is not d2["chain"]
    d1["chain"].append("changed")
    assert "changed" not in d2["chain"]
