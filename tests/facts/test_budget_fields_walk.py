"""budget.check_fields walks a probe's field rules as one tree (issue 51: judging's CPU); what it
refuses, its notes and their order must be what checking the rules one by one gave.

The oracle below is the rule-by-rule walk check_fields used before: each rule's path walked over the
data the previous rules left."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.facts.normalize.budget import FIELD_RULES, check_fields
from orchestrator.facts.numbers import INDEX, Bound, check, value_int


def _oracle_one(value: Any, path: tuple[str, ...], rng: Bound, refused: list[str]) -> Any:
    if not path:
        if rng is INDEX and isinstance(value, str):
            index, why = value_int(value, rng)
            if index is None:
                refused.append(str(why))
            return index
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            ok, why = check(value, rng)
            if ok is None:
                refused.append(str(why))
                return None
        return value
    key, rest = path[0], path[1:]
    if key == "*" and isinstance(value, list):
        return [_oracle_one(v, rest, rng, refused) for v in value]
    if key == "*" and isinstance(value, dict):
        return {k: _oracle_one(v, rest, rng, refused) for k, v in value.items()}
    if not isinstance(value, dict) or key not in value:
        return value
    return {**value, key: _oracle_one(value[key], rest, rng, refused)}


def _oracle(probe: str, data: Any) -> tuple[Any, list[str]]:
    notes = []
    for path, rng in FIELD_RULES.get(probe, ()):
        refused: list[str] = []
        data = _oracle_one(data, path, rng, refused)
        if refused:
            notes.append(f"{probe}: {len(refused)} value(s) of {'.'.join(path)} refused ({refused[0]}): unknown")
    return data, notes


# Figures a host may send where a number belongs: in range, out of range both ways, not finite,
# of hundreds of digits, a bool, text (a port as text, text that is no number), null, containers.
_HOSTILE = [1, 0, -1, -5.5, 1e17, 25000.0, float("nan"), float("inf"), -float("inf"), 10**400, True, False,
            "1", "x", "", None, [], {}, [3], {"a": -1}]


def _nic(bad: Any) -> dict[str, Any]:
    port = {"port": bad, "counters": {"symbol_error": bad, "ok": 3}, "hw_counters": {"rx": bad, "tx": 1}}
    return {"infiniband": [{"name": "mlx5_0", "ports": [port, {**port, "port": 2}, "not a port"]}, 7],
            "net": [{"name": "eth0", "speed": bad, "mtu": bad, "carrier_changes": 1}, {"name": "eth1"}]}


def _p2p(bad: Any) -> dict[str, Any]:
    return {"gpus": [{"h2d_gbps": bad, "d2h_gbps": 20.0, "local_ce_gbps": bad}, {"h2d_gbps": 30.0}],
            "pairs": [{"ce_gbps": bad, "sm_read_gbps": bad, "latency_us": bad}, {"ce_gbps": 300.0}],
            "bidirectional": {"0-1": {"total_gbps": bad}} if isinstance(bad, int) else [{"total_gbps": bad}],
            "all_to_host": {"d2h_total_gbps": bad, "h2d_total_gbps": 5}}


def _nvml(bad: Any) -> dict[str, Any]:
    return {"gpus": [{"temperature_c": bad, "power_w": bad, "fans": [{"speed_pct": bad}, {"speed_pct": 50}]},
                     {"fans": {"0": {"speed_pct": bad}}}, None]}


def _fabric(bad: Any) -> dict[str, Any]:
    result = {"busbw_gbps": bad, "algbw_gbps": 1.0, "time_us": bad, "size_bytes": 8, "count": bad, "wrong": 0}
    return {"nccl": [{"data": {"results": [result, result]}}, {"data": None}],
            "discover": {"hcas": [{"rate_gbps": bad}, {"rate_gbps": 200}]}}


_SHAPES = {"nic": _nic, "p2p": _p2p, "nvml": _nvml, "fabric": _fabric,
           "nccl": lambda bad: {"results": [{"busbw_gbps": bad, "size_bytes": bad}, {"time_us": 5.0}]}}


@pytest.mark.parametrize("probe", sorted(_SHAPES))
@pytest.mark.parametrize("bad", _HOSTILE, ids=repr)
def test_the_tree_walk_refuses_and_notes_what_rule_by_rule_did(probe: str, bad: Any) -> None:
    data = _SHAPES[probe](bad)
    before = copy.deepcopy(data)
    got, notes = check_fields(probe, data)
    want, want_notes = _oracle(probe, data)
    assert notes == want_notes
    assert repr(got) == repr(want)  # repr: NaN is unequal to itself, and 1, 1.0 and True differ
    assert repr(data) == repr(before), "the input is never changed"


@pytest.mark.parametrize("probe", sorted(_SHAPES))
def test_data_with_nothing_to_refuse_is_handed_on_uncopied(probe: str) -> None:
    data = _SHAPES[probe](7)
    got, notes = check_fields(probe, data)
    assert notes == [] and got is data


def _nic_bad_last(bad: Any) -> dict[str, Any]:
    port = {"port": 1, "counters": {"ok": 3, "also": 0.5, "symbol_error": bad}, "hw_counters": {"tx": 1, "rx": bad}}
    return {"infiniband": [{"name": "mlx5_0", "ports": [port, {**port, "counters": [4, 5, bad]}]}]}


@pytest.mark.parametrize("bad", _HOSTILE, ids=repr)
def test_a_figure_after_in_range_ones_is_still_judged(bad: Any) -> None:
    """A leaf's in-range figures are told in one pass (issue 51, round 3): a figure to refuse after
    them, in a dict or a list of counters, is refused and noted as rule by rule."""
    data = _nic_bad_last(bad)
    got, notes = check_fields("nic", data)
    want, want_notes = _oracle("nic", data)
    assert notes == want_notes
    assert repr(got) == repr(want)
