"""Diff by digest: two stored runs judged in workers carry a drift digest per host
(verdict/drift.py drift_digest, fleet.digests.json), and `probe diff` decodes only the hosts whose
digest, class or findings differ.  The answer must be the one of comparing every record."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from orchestrator.engine.results import HostInput
from orchestrator.store.fleet_file import DIGESTS_NAME, read_fleet, write_fleet
from orchestrator.verdict.drift import diff_fleets, drift_digest
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet, judge_host
from tests.support.demo_inputs import copies
from tests.support.judged import judged, meta


def _other_board(h: HostInput, tag: str) -> HostInput:
    """The host with another board in GPU0's slot (a new UUID at the same bus id)."""
    data = dict(h.data)
    data["nvml"] = copy.deepcopy(data["nvml"])
    data["nvml"]["gpus"][0]["uuid"] = f"GPU-other-board-{tag}"
    return dataclasses.replace(h, data=data)


def _stored(root: Path, inputs: list[HostInput]) -> Path:
    root.mkdir()
    fleet = build_fleet(meta(root.name), inputs, lambda h: Expectations(), lambda host: {}, spool=root, workers=2).to_document()
    return write_fleet(root / "fleet.json", fleet)


def _with_nvml(inputs: list[HostInput]) -> list[HostInput]:
    out = []
    for h in inputs:
        if h.probes.get("nvml", {}).get("outcome") == "ok" and (h.data.get("nvml") or {}).get("gpus"):
            out.append(h)
    return out


def test_diff_by_digest_equals_the_full_comparison_and_names_exactly_the_changed_hosts(
        demo_inputs: list[HostInput], tmp_path: Path) -> None:
    base = copies(_with_nvml(demo_inputs), 48)
    changed = {base[5].name, base[30].name, base[47].name}
    other = [_other_board(h, h.name) if h.name in changed else h for h in base]
    a, b = _stored(tmp_path / "a", base), _stored(tmp_path / "b", other)
    assert a.with_name(DIGESTS_NAME).is_file() and b.with_name(DIGESTS_NAME).is_file()
    by_digest = diff_fleets(judged(read_fleet(a)), judged(read_fleet(b)))
    assert {c.host for c in by_digest.changes if c.kind == "gpu.replaced"} == changed
    # elsewhere only the duplicate-UUID findings the old UUID shared with the changed hosts' copies
    assert {c.subject.split()[0] for c in by_digest.changes if c.host not in changed} <= {"identity.uuid.duplicate"}
    assert by_digest.compared == 48
    # the same fleets without their digests: every record is decoded and compared
    for p in (a, b):
        p.with_name(DIGESTS_NAME).unlink()
    assert diff_fleets(judged(read_fleet(a)), judged(read_fleet(b))).to_dict() == by_digest.to_dict()


def test_a_digest_from_another_fleet_json_is_not_used(demo_inputs: list[HostInput], tmp_path: Path) -> None:
    base = copies(_with_nvml(demo_inputs), 20)
    a = _stored(tmp_path / "a", base)
    b = _stored(tmp_path / "b", [*base[:3], _other_board(base[3], "x"), *base[4:]])
    # b's digests say "unchanged" for every host, but belong to another file: ignored
    b.with_name(DIGESTS_NAME).write_bytes(a.with_name(DIGESTS_NAME).read_bytes())
    d = diff_fleets(judged(read_fleet(a)), judged(read_fleet(b)))
    assert base[3].name in {c.host for c in d.changes if c.kind == "gpu.replaced"}
    for p in (a, b):
        p.with_name(DIGESTS_NAME).unlink()
    assert diff_fleets(judged(read_fleet(a)), judged(read_fleet(b))).to_dict() == d.to_dict()


def test_no_digest_where_a_diff_must_read_the_record(demo_inputs: list[HostInput]) -> None:
    h = _with_nvml(demo_inputs)[0]
    rec, _ = judge_host(h, Expectations())
    digest = drift_digest(rec)
    assert digest is not None and drift_digest(copy.deepcopy(rec)) == digest
    # what diff compares changes the digest; what it does not read (probe durations) does not
    moved = copy.deepcopy(rec)
    moved["facts"]["gpus"]["list"][0]["uuid"] = "GPU-elsewhere"
    assert drift_digest(moved) != digest
    slower = copy.deepcopy(rec)
    slower["facts"]["host"] = {"hostname": "renamed"}
    assert drift_digest(slower) == digest
    # unreachable, no stored not-judged ids, or GPUs with no identity (a self-diff shows changes)
    assert drift_digest({**rec, "outcome": "unreachable"}) is None
    assert drift_digest({k: v for k, v in rec.items() if k != "not_judged"}) is None
    anonymous = copy.deepcopy(rec)
    for g in anonymous["facts"]["gpus"]["list"]:
        g["uuid"] = g["bus_id"] = None
    assert drift_digest(anonymous) is None
