"""Verdicts held compactly by `probe merge` (verdict/held.py) answer every fleet-wide step as the
verdicts they were made from, and are smaller.

The fleet: the demo fleet's stored raw files copied under new names (tests/verdict/
test_fleet_parallel.py's, where every fleet check is given work).
"""

from __future__ import annotations

import io
import json
import math
import sys
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.verdict import causes, handoff
from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.checks import FLEET_CHECKS, fleet_facts
from orchestrator.verdict.checks import gpu as gpu_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import DeviceKind, fault, located, pci_device
from orchestrator.verdict.held import Holder, PackedFacts
from orchestrator.verdict.judge import HostVerdict, judge_host, stored_verdict
from tests.verdict.test_fleet_parallel import _copies, _every_fleet_check_has_work, _expect


def _typed(value: Any) -> Any:
    """`value` with each leaf's type beside it: 1, 1.0 and True (and 0.0, -0.0) told apart."""
    if isinstance(value, dict):
        return ["dict", [[k, _typed(v)] for k, v in value.items()]]
    if isinstance(value, list):
        return ["list", [_typed(v) for v in value]]
    if isinstance(value, float):
        return ["float", repr(value)]
    return [type(value).__name__, value]


# JSON values a host may send that a lossy holder would give back changed: numbers of one value in
# three types, signed zero and non-finite floats, integers past 64 bits, strings past ASCII (a
# lone surrogate is what json.loads gives for "\ud800"), empty and nested containers, key order.
HOSTILE_VALUES: list[Any] = [
    {"a": 1, "b": 1.0, "c": True, "d": 0, "e": 0.0, "f": False, "g": None},
    {"zero": -0.0, "inf": math.inf, "ninf": -math.inf, "big": 2 ** 80, "neg": -(2 ** 70), "tiny": 5e-324},
    {"s": "ünï \u2603 \U0001f600", "lone": json.loads('"\\ud800"'), "nul": "a\x00b", "empty": ""},
    {"z": {}, "y": [], "x": [[]], "w": [{}], "v": {"u": {"t": [1, [2, [3.5, None]]]}}},
    {"b": 2, "a": 1, "c": {"2": 0, "10": 1, "1": 2}},
    [{"uuid": "GPU-1", "serial": "1"}, {"uuid": "GPU-1", "serial": 1}],
    "a bare string", 7, None,
]


@pytest.mark.parametrize("value", HOSTILE_VALUES, ids=range(len(HOSTILE_VALUES)))
def test_a_held_section_is_read_back_as_the_value_it_was(value: Any) -> None:
    held = Holder().facts({"gpus": value, "host": {"hostname": "h1"}})
    assert isinstance(held, PackedFacts)
    assert list(held) == ["gpus", "host"] and len(held) == 2 and "gpus" in held and "nic" not in held
    assert _typed(held["gpus"]) == _typed(value)
    assert _typed(held.get("gpus")) == _typed(value)
    assert held.get("nic") is None
    with pytest.raises(KeyError):
        held["nic"]
    # each read is a value of its own: a check that changed one would not change the next read
    if isinstance(value, (dict, list)):
        assert held["gpus"] is not held["gpus"]


def test_equal_sections_names_and_expectations_are_held_once() -> None:
    holder = Holder()
    nic = [{"nic": {"devices": [{"name": "mlx5_0", "rate": 400}]}, "host": {"hostname": h}} for h in "abc"]
    a, b, c = (holder.facts(f) for f in nic)
    assert a._names is b._names is c._names
    assert a._packed == 0b11 and b._packed == c._packed == 0b10  # the NICs seen before: one object
    assert b["nic"] is c["nic"] is nic[1]["nic"] and a["nic"] == b["nic"]
    assert b._values[1] is not c._values[1]  # the hostnames differ
    odd = holder.facts({"nic": {"devices": [{"name": "mlx5_0", "rate": 400.0}]}})
    assert odd._packed == 1 and _typed(odd["nic"]) != _typed(b["nic"])  # 400.0 is not 400
    one, other = Expectations(gpu_count=8), Expectations(gpu_count=8)
    assert holder.expect(one) is holder.expect(other)
    assert holder.expect(Expectations(gpu_count=4)) == Expectations(gpu_count=4)


class _Odd:
    """Not a JSON value: facts made by a check's own test may hold anything."""


@pytest.mark.parametrize("odd", [_Odd(), handoff.Frozen(("l", ())), {1, 2}, b"bytes"],
                         ids=["object", "frozen", "set", "bytes"])
def test_facts_the_holder_cannot_write_are_held_as_they_are(odd: Any) -> None:
    facts = {"host": {"hostname": "h1"}, "gpus": {"list": odd}}
    verdict = stored_verdict({"name": "h1", "outcome": "ok", "probes": {}, "facts": {}}, [])
    verdict.fleet_view.facts = facts  # type: ignore[assignment]
    held = Holder().verdict(verdict)
    got = held.fleet_view.facts["gpus"]["list"]
    assert got is odd or (type(got) is type(odd) and got == odd)


def _deep(obj: Any, seen: set[int]) -> int:
    """Bytes held by `obj` and what it refers to, each object once over calls sharing `seen`."""
    size, stack = 0, [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen or o is None or isinstance(o, (bool, type)):
            continue
        seen.add(id(o))
        size += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif isinstance(o, PackedFacts):
            stack.extend((o._names, o._values))
    return size


def _fleet(demo_inputs: list[HostInput]) -> tuple[list[HostVerdict], list[HostView]]:
    """The verdicts of a fleet on which every fleet check finds something, as a merge gets them
    (through a handoff Reader, equal values shared)."""
    inputs = _copies(demo_inputs, 80)
    judged = [(h, *judge_host(h, _expect(h))) for h in inputs]
    facts_of = [rec["facts"] for _, rec, _ in judged]
    _every_fleet_check_has_work(facts_of, [h.name for h, _, _ in judged])
    verdicts, views = [], []
    for (h, _, verdict), facts in zip(judged, facts_of):
        outcomes = {**verdict.fleet_view.outcomes, **({"nccl": "ok"} if "nccl" in facts else {}),
                    **({"fabric": "ok"} if "fabric" in facts else {})}
        view = HostView(name=h.name, facts=fleet_facts(facts), outcomes=outcomes, expect=_expect(h), vars=h.vars)
        verdicts.append(HostVerdict(h.name, verdict.outcome, [], verdict.descriptor, view))
        views.append(view)
    return verdicts, views


def test_every_fleet_check_finds_the_same_over_held_verdicts(demo_inputs: list[HostInput]) -> None:
    verdicts, views = _fleet(demo_inputs)
    holder = Holder()
    held = [holder.verdict(v).fleet_view for v in verdicts]
    assert all(isinstance(v.facts, PackedFacts) for v in held)
    for check in FLEET_CHECKS:
        on_plain = [f.to_dict() for f in check(views)]
        assert on_plain, f"{check.__module__}.{check.__name__} finds nothing on this fleet: give it work"
        assert [f.to_dict() for f in check(held)] == on_plain, f"{check.__module__}.{check.__name__}"


def test_held_facts_are_a_fraction_of_the_dicts_they_were(demo_inputs: list[HostInput]) -> None:
    """The dicts as a merge held them (equal values shared by the handoff Reader) against the held
    form: the identities (GPU UUIDs, serials) make each host's GPU dicts its own, and those are what
    the held form packs; the sections hosts have alike are held once either way."""
    verdicts, _ = _fleet(demo_inputs)
    buf = io.BytesIO()
    for v in verdicts:
        handoff.dump(v, buf)
    buf.seek(0)
    shared = list(handoff.Reader().load_all(buf))
    seen: set[int] = set()
    as_dicts = sum(_deep(v.fleet_view.facts, seen) for v in shared)
    holder = Holder()
    held = [holder.verdict(v) for v in shared]  # alive while measured: a freed object's id is reused
    seen = set()
    as_held = sum(_deep(v.fleet_view.facts, seen) for v in held)
    own_dicts, own_held, dict_seen = 0, 0, set()
    for plain, packed in ((v.fleet_view.facts, h.fleet_view.facts) for v, h in zip(shared, held)):
        assert isinstance(packed, PackedFacts)
        for k, name in enumerate(packed._names):
            if packed._packed >> k & 1:  # a section of this host's own
                own_dicts += _deep(plain[name], dict_seen)
                own_held += sys.getsizeof(packed._values[k])
    assert own_dicts > 0
    assert own_held * 4 < own_dicts, (own_held, own_dicts)
    assert as_held < as_dicts, (as_held, as_dicts)


def test_findings_grouped_as_they_were_are_kept_not_copied() -> None:
    """A merge hands causes.group every host's stored findings, grouped when their run was judged,
    beside the new fleet-wide ones: a copy of each was every finding of the fleet held twice."""
    table = [Cause("gpu.xid", "gpu.fallen_off_bus", Scope.DEVICE)]
    at = located("GPU1 (0000:2a:00.0)", [pci_device(DeviceKind.GPU, "0000:2a:00.0", gpu=1)])
    stored = [fault("gpu.xid", h, at, "Xid 79") for h in ("h1", "h2", "h3")]
    stored += [fault("gpu.fallen_off_bus", "h1", at, "fell off"), fault("host.kernel.old", "h2", "kernel", "old")]
    first = causes.group(stored, causes.by_consequence(table))
    again = causes.group(first, causes.by_consequence(table))
    assert [a is b for a, b in zip(again, first)] == [True] * len(first)
    # ... and only those: a finding whose root changes is a new one, the stored one left alone
    fell = next(f for f in first if f.id == "gpu.fallen_off_bus")
    moved = causes.group([f for f in first if not (f.id == "gpu.xid" and f.host == "h1")], {})
    assert next(f for f in moved if f.id == "gpu.fallen_off_bus") is not fell and fell.caused_by is not None


@pytest.mark.parametrize("field", ["uuid", "serial"])
def test_the_identity_duplicate_checks_make_places_only_for_repeated_values(field: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """At fleet scale every GPU's identity is its own: a place (subject and device) made for each
    GPU before looking for repeats was the largest step of a merge's peak."""
    made: list[Any] = []
    real = gpu_checks._subject

    def counted(g: Any) -> Any:
        made.append(g)
        return real(g)

    monkeypatch.setattr(gpu_checks, "_subject", counted)
    views = []
    for h in range(40):
        gpus = [{"index": i, "bus_id": f"0000:{i:02x}:00.0", "uuid": f"GPU-{h}-{i}", "serial": f"{h}{i:03d}"}
                for i in range(8)]
        if h in (7, 30):  # one GPU of two hosts shares an identity (a forged list, a copied VM)
            gpus[3] = {**gpus[3], "uuid": "GPU-twin", "serial": "99999"}
        views.append(HostView(name=f"h{h:02d}", facts=Holder().facts({"gpus": {"list": gpus}}),  # type: ignore[arg-type]
                              outcomes={"nvml": "ok"}))
    check = gpu_checks.check_uuid_duplicates if field == "uuid" else gpu_checks.check_serial_duplicates
    found = list(check(views))
    assert sorted(f.host for f in found) == ["h07", "h30"]
    assert len(made) == 2, f"{len(made)} places made for 2 repeated GPUs of {8 * len(views)}"
