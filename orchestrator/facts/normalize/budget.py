"""A per-host budget that does not depend on what the host claims.

Normalizers size their matrices from the lists a host sends (GPUs x GPUs, devices x devices), so
a few kilobytes naming 3,000 empty GPUs used to cost hundreds of megabytes.  Before any
normalizer runs, every list a probe's data may hold is cut to a cap no real machine comes near;
what was cut is reported (-> `probe.data.malformed`, warn) and the host is judged on the bounded
part.  The caps are documented in docs/reliability.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from orchestrator.facts.numbers import (
    COUNT,
    GPU_GBYTES,
    INDEX,
    LATENCY_US,
    NET_GBITS,
    NET_MBITS,
    PERCENT,
    POWER_W,
    SIZE_BYTES,
    TEMPERATURE_C,
    Bound,
    check,
    value_int,
)

MAX_GPUS = 64  # the largest single-host systems today have 8-16 GPUs (NVL72 nodes: 4)
MAX_LINKS = 64  # NVLink links per GPU (H100/B200: 18)
MAX_PCI_DEVICES = 4096  # PCI functions per host, SR-IOV virtual functions included
MAX_NICS = 256  # network functions the topology matrix holds (GPUs + NICs square)
MAX_PORTS = 64  # net devices / RDMA ports per PCI function, path entries per device
MAX_NUMA_NODES = 1024
MAX_KMSG_LINES = 20000  # kernel-log lines judged (the kmsg probe keeps 5,000 by default; journalctl -n 20000)
MAX_ITEMS = 256  # any other list of a probe's data that only carries notes (errors, evidence)
MAX_STRING = 64 * 1024  # characters of one string value (pcie config space as hex: 8 KiB)
# No figure fleetprobe reads comes near this (bandwidths in GB/s, times in seconds, powers in watts;
# byte counts are integers): a float past it is forged or garbage.  Within it, every sum of a
# budget's worth of figures, mean and product of two stays finite, so no check or average turns a
# host's numbers into Infinity.
MAX_FIGURE = 1e18
STRING_NOTE = "_fleetprobe_cut_strings"  # key the parser adds to `data`: the lengths of the strings it cut

def figure(value: float | None) -> float | None:
    """A figure read from text, or None where it is none: not finite, or past MAX_FIGURE."""
    return value if value is not None and -MAX_FIGURE <= value <= MAX_FIGURE else None


# probe -> (path, cap, what it counts); "*" in a path: every element of a list or value of a dict
_Rule = tuple[tuple[str, ...], int, str]
_SQUARE = MAX_GPUS
RULES: dict[str, tuple[_Rule, ...]] = {
    "nvml": ((("gpus",), MAX_GPUS, "GPUs"),
             (("levels",), _SQUARE, "topology matrix rows"), (("levels", "*"), _SQUARE, "topology matrix columns"),
             (("p2p", "*"), _SQUARE, "P2P matrix rows"), (("p2p", "*", "*"), _SQUARE, "P2P matrix columns"),
             (("missing_symbols",), MAX_ITEMS, "missing symbols")),
    "nvlink": ((("gpus",), MAX_GPUS, "GPUs"), (("gpus", "*", "links"), MAX_LINKS, "NVLink links of a GPU"),
               (("missing_symbols",), MAX_ITEMS, "missing symbols")),
    "p2p": ((("gpus",), MAX_GPUS, "GPUs"), (("bidirectional",), MAX_GPUS * (MAX_GPUS - 1) // 2, "GPU pairs"),
            (("can_access_peer",), _SQUARE, "matrix rows"), (("can_access_peer", "*"), _SQUARE, "matrix columns"),
            (("nvml_nvlink",), _SQUARE, "matrix rows"), (("nvml_nvlink", "*"), _SQUARE, "matrix columns"),
            (("p2p_rank",), _SQUARE, "matrix rows"), (("p2p_rank", "*"), _SQUARE, "matrix columns"),
            (("all_to_host", "gpus"), MAX_GPUS, "GPUs"), (("errors",), MAX_ITEMS, "errors"),
            (("not_reached",), MAX_GPUS, "GPUs")),
    "pcie": ((("devices",), MAX_PCI_DEVICES, "PCI devices"),
             (("devices", "*", "netdevs"), MAX_PORTS, "network ports of a device"),
             (("devices", "*", "rdma"), MAX_PORTS, "RDMA ports of a device"),
             (("devices", "*", "path"), MAX_PORTS, "path entries of a device"),
             (("nvidia", "gpus"), MAX_GPUS, "driver GPUs"), (("nvidia", "dev_nodes"), MAX_GPUS * 2, "device nodes"),
             (("nvidia", "nvswitch_nodes"), MAX_GPUS, "NVSwitch nodes")),
    "host": ((("numa", "nodes"), MAX_NUMA_NODES, "NUMA nodes"),
             (("virtualization", "evidence"), MAX_ITEMS, "virtualization evidence")),
    "nic": ((("infiniband",), MAX_NICS, "RDMA devices"), (("infiniband", "*", "ports"), MAX_PORTS, "ports of an RDMA device"),
            (("net",), MAX_NICS, "network interfaces")),
    "kmsg": ((("lines",), MAX_KMSG_LINES, "kernel-log lines"), (("attempts",), MAX_ITEMS, "read attempts")),
    "nccl": ((("gpus",), MAX_GPUS, "GPUs"), (("selected",), MAX_GPUS, "GPUs"), (("results",), MAX_ITEMS, "results"),
             (("errors",), MAX_ITEMS, "errors"), (("debug_lines",), MAX_KMSG_LINES, "NCCL log lines"),
             (("not_reached",), MAX_GPUS, "GPUs")),
}


# probe -> (path, range) of the figures a check compares: a value outside its range (a negative
# bandwidth, 1e17 GB/s, a temperature of 5,000 C) is made unknown before any normalizer runs, with
# a note (-> `probe.data.malformed`), so it is never a measurement.  NaN and Infinity never get
# this far: envelopes are strict JSON (engine/envelope.py).  The ranges: facts/numbers.py.
_NCCL_FIGURES = (("busbw_gbps", GPU_GBYTES), ("algbw_gbps", GPU_GBYTES), ("time_us", LATENCY_US),
                 ("size_bytes", SIZE_BYTES), ("count", COUNT), ("wrong", COUNT))
_FieldRule = tuple[tuple[str, ...], Bound]
FIELD_RULES: dict[str, tuple[_FieldRule, ...]] = {
    "nccl": tuple((("results", "*", k), b) for k, b in _NCCL_FIGURES),
    "fabric": (*((("nccl", "*", "data", "results", "*", k), b) for k, b in _NCCL_FIGURES),
               (("discover", "hcas", "*", "rate_gbps"), NET_GBITS)),
    "p2p": (*((("gpus", "*", k), GPU_GBYTES) for k in ("h2d_gbps", "d2h_gbps", "local_ce_gbps", "local_sm_gbps")),
            (("pairs", "*", "ce_gbps"), GPU_GBYTES), (("pairs", "*", "sm_read_gbps"), GPU_GBYTES),
            (("pairs", "*", "latency_us"), LATENCY_US), (("bidirectional", "*", "total_gbps"), GPU_GBYTES),
            (("all_to_host", "d2h_total_gbps"), GPU_GBYTES), (("all_to_host", "h2d_total_gbps"), GPU_GBYTES)),
    "nvml": ((("gpus", "*", "temperature_c"), TEMPERATURE_C), (("gpus", "*", "power_w"), POWER_W),
             (("gpus", "*", "fans", "*", "speed_pct"), PERCENT)),
    "nic": ((("infiniband", "*", "ports", "*", "port"), INDEX), (("net", "*", "speed"), NET_MBITS), (("net", "*", "carrier_changes"), COUNT), (("net", "*", "mtu"), COUNT),
            (("infiniband", "*", "ports", "*", "counters", "*"), COUNT),
            (("infiniband", "*", "ports", "*", "hw_counters", "*"), COUNT)),
}


@dataclass(frozen=True)
class _Walk:
    """One probe's FIELD_RULES as a tree of path steps, built once: the paths that share a prefix
    (an RDMA port's port, counters and hw_counters; a GPU pair's three figures) walk the data once
    instead of once a rule.  `ends`: the rules (by index) whose path ends here."""

    ends: tuple[tuple[int, Bound], ...]
    steps: tuple[tuple[str, _Walk], ...]
    # the range of a walk that is one rule's figure and nothing below it (a GPU's temperature, an
    # RDMA port's counter): its step tells an in-range figure inline, without a call per figure
    leaf: Bound | None = None


def _walk_of(rules: list[tuple[int, tuple[str, ...], Bound]]) -> _Walk:
    keys = dict.fromkeys(path[0] for _, path, _ in rules if path)
    ends = tuple((i, rng) for i, path, rng in rules if not path)
    steps = tuple((k, _walk_of([(i, path[1:], rng) for i, path, rng in rules if path and path[0] == k]))
                  for k in keys)
    return _Walk(ends, steps, ends[0][1] if len(ends) == 1 and not steps else None)


_WALKS: dict[str, _Walk] = {probe: _walk_of([(i, path, rng) for i, (path, rng) in enumerate(rules)])
                            for probe, rules in FIELD_RULES.items()}


def check_fields(probe: str, data: Any) -> tuple[Any, list[str]]:
    """`data` with every figure of FIELD_RULES[probe] outside its range made None (copies only
    where one was), and one note per field path: '<probe>: 2 value(s) of results.*.busbw_gbps
    refused (GPU bandwidth -5 GB/s is outside 0..20000 ...): unknown'."""
    rules = FIELD_RULES.get(probe, ())
    refused: list[list[str]] = [[] for _ in rules]
    if rules:
        data = _refuse(data, _WALKS[probe], refused)
    return data, [f"{probe}: {len(why)} value(s) of {'.'.join(path)} refused ({why[0]}): unknown"
                  for (path, _), why in zip(rules, refused) if why]


def _refuse(value: Any, walk: _Walk, refused: list[list[str]]) -> Any:
    """`value` with the rules of `walk` applied, copied only where a figure was refused.  The
    rules' paths end on different figures, so applying them one after another, in any order,
    changes what applying them rule by rule over the whole data changed."""
    for i, rng in walk.ends:
        value = _figure(value, rng, refused[i])
    for key, sub in walk.steps:
        value = _step(value, key, sub, refused)
    return value


def _step(value: Any, key: str, sub: _Walk, refused: list[list[str]]) -> Any:
    leaf = sub.leaf
    if leaf is not None and key == "*" and isinstance(value, (list, dict)) and all(
            (type(v) is int or type(v) is float) and leaf.lo <= v <= leaf.hi
            for v in (value if isinstance(value, list) else value.values())):
        return value  # every figure in range, the usual case: _figure would return each one as it is
    if key == "*" and isinstance(value, list):
        out: list[Any] | None = None
        for j, v in enumerate(value):
            new = _refuse(v, sub, refused)
            if new is not v:
                if out is None:
                    out = list(value)
                out[j] = new
        return value if out is None else out
    if key == "*" and isinstance(value, dict):
        changed: dict[Any, Any] = {}
        for k, v in value.items():
            new = _refuse(v, sub, refused)
            if new is not v:
                changed[k] = new
        return {**value, **changed} if changed else value
    if not isinstance(value, dict) or key not in value:
        return value
    inner = value[key]
    if leaf is not None and (type(inner) is int or type(inner) is float) and leaf.lo <= inner <= leaf.hi:
        return value  # in range: as _figure would tell it
    inner = _refuse(inner, sub, refused)
    return value if inner is value[key] else {**value, key: inner}


def _figure(value: Any, rng: Bound, refused: list[str]) -> Any:
    """One figure checked against its range: the figure, or None with why appended to `refused`."""
    if (type(value) is int or type(value) is float) and rng.lo <= value <= rng.hi:
        return value  # the usual case, told without check()'s calls (NaN fails the comparison)
    if rng is INDEX and isinstance(value, str):  # a number (a port) that text may carry: read it
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


# Raw mode (nvidia-smi / lspci text parsed on the controller) gives facts sections directly: the
# same caps, on the sections, before the topology merge squares them.
_TOPO = MAX_GPUS + MAX_NICS
SECTION_RULES: dict[str, tuple[_Rule, ...]] = {
    "gpus": ((("list",), MAX_GPUS, "GPUs"), (("order",), MAX_GPUS, "GPUs in the bus order"),
             (("levels",), _SQUARE, "topology matrix rows"), (("levels", "*"), _SQUARE, "topology matrix columns"),
             (("p2p", "*"), _SQUARE, "P2P matrix rows"), (("p2p", "*", "*"), _SQUARE, "P2P matrix columns")),
    "nvlink": ((("gpus",), MAX_GPUS, "GPUs"), (("gpus", "*", "links"), MAX_LINKS, "NVLink links of a GPU")),
    "topology": ((("devices",), _TOPO, "topology devices"), (("matrix",), _TOPO, "topology matrix rows"),
                 (("matrix", "*"), _TOPO, "topology matrix columns"), (("source",), _TOPO, "topology matrix rows"),
                 (("source", "*"), _TOPO, "topology matrix columns")),
    "pcie": ((("devices",), MAX_PCI_DEVICES, "PCI devices"), (("gpus",), MAX_GPUS, "GPU functions"),
             (("nics",), MAX_NICS, "network functions")),
}


def bound_sections(facts: dict[str, Any], origin: str) -> tuple[dict[str, Any], list[str]]:
    """Facts sections parsed from text (`origin`: "raw") cut to the same caps, with a note per cut."""
    notes: list[str] = []
    out = dict(facts)
    for section, rules in SECTION_RULES.items():
        if section not in out:
            continue
        for path, cap, what in rules:
            out[section] = _cut(out[section], path, cap, _noter(notes, origin, what, cap))
    return out, notes


def bound(probe: str, data: Any) -> tuple[Any, list[str]]:
    """`data` with every list of the probe's budget cut to its cap (copies, the input is not
    changed), and one note per cut: '<probe>: 3000 GPUs reported, judged on the first 64'."""
    notes: list[str] = []
    for path, cap, what in RULES.get(probe, ()):
        data = _cut(data, path, cap, _noter(notes, probe, what, cap))
    if probe == "pcie":
        data = _cut_kinds(data, notes)
    data, refused = check_fields(probe, data)
    notes.extend(refused)
    if isinstance(data, dict) and STRING_NOTE in data:  # the parse cut long strings (engine/envelope.py)
        longest = data[STRING_NOTE]
        data = {k: v for k, v in data.items() if k != STRING_NOTE}
        if isinstance(longest, list) and longest and all(isinstance(n, int) for n in longest):
            notes.append(f"{probe}: {len(longest)} string value(s) of up to {max(longest)} characters reported, "
                         f"more than the {MAX_STRING} a value is judged on; judged on the first {MAX_STRING}")
    return data, notes


def cut_long_strings(doc: Any, whole: Collection[str] = ()) -> Any:
    """`doc` (a parsed envelope) with every string past MAX_STRING cut, and the lengths cut noted
    under STRING_NOTE in its `data`, so bound() reports them.  The parser calls it only when its
    scan found such a string: a walk over every host's every value costs more than normalizing.
    `whole`: keys of `data` kept as they are (raw mode's command outputs, which the controller read
    itself within the output cap and whose parsers read whole)."""
    cut: list[int] = []
    data = doc.get("data") if isinstance(doc, dict) else None
    if whole and isinstance(data, dict) and any(k in data for k in whole):
        rest = _cut_strings({k: v for k, v in doc.items() if k != "data"}, cut)
        kept = {_cut_strings(k, cut): v if k in whole else _cut_strings(v, cut) for k, v in data.items()}
        out = {**rest, "data": kept} if cut else doc
    else:
        out = _cut_strings(doc, cut)
    if cut and isinstance(out, dict) and isinstance(out.get("data"), dict):
        out = {**out, "data": {**out["data"], STRING_NOTE: cut}}
    return out


def _cut_strings(value: Any, cut: list[int]) -> Any:
    """Every string of `value`, keys included, cut to MAX_STRING characters (copies only where
    something was cut); the lengths cut are appended to `cut`.  A 10 MB hostname would otherwise be
    copied into fleet.json, every view and the report, and so would a key that facts keep (an AER
    counter's name).  Two keys alike in their first MAX_STRING characters become one: the later value."""
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            cut.append(len(value))
            return value[:MAX_STRING]
        return value
    if isinstance(value, list):
        out = [_cut_strings(v, cut) for v in value]
        return out if any(a is not b for a, b in zip(out, value)) else value
    if isinstance(value, dict):
        pairs = [(_cut_strings(k, cut), k, _cut_strings(v, cut), v) for k, v in value.items()]
        if all(k is k0 and v is v0 for k, k0, v, v0 in pairs):
            return value
        return {k: v for k, _, v, _ in pairs}
    return value


def _noter(notes: list[str], origin: str, what: str, cap: int) -> Callable[[int], None]:
    """What a cut says: '<origin>: 3000 GPUs reported, more than the 64 a host is judged on; ...'."""
    return lambda n: notes.append(f"{origin}: {n} {what} reported, more than the {cap} a host is judged on; "
                                  f"judged on the first {cap}")


def _cut(value: Any, path: tuple[str, ...], cap: int, note: Callable[[int], None]) -> Any:
    if not path:
        if isinstance(value, list) and len(value) > cap:
            note(len(value))
            return value[:cap]
        return value
    key, rest = path[0], path[1:]
    if key == "*":
        if isinstance(value, list):
            if len(rest) == 1 and _within(value, rest[0], cap):
                return value  # the usual case (each PCI device's ports), told without a copy per element
            once = _once(note)
            out = [_cut(v, rest, cap, once) for v in value]
            return out if any(a is not b for a, b in zip(out, value)) else value
        if isinstance(value, dict):
            once = _once(note)
            new = {k: _cut(v, rest, cap, once) for k, v in value.items()}
            return new if any(new[k] is not value[k] for k in value) else value
        return value
    if not isinstance(value, dict) or key not in value:
        return value
    inner = _cut(value[key], rest, cap, note)
    return value if inner is value[key] else {**value, key: inner}


def _within(items: list[Any], key: str, cap: int) -> bool:
    """No element of `items` holds a list under `key` longer than `cap`."""
    for item in items:
        if isinstance(item, dict):
            inner = item.get(key)
            if isinstance(inner, list) and len(inner) > cap:
                return False
    return True


def _once(note: Callable[[int], None]) -> Callable[[int], None]:
    """Report a cut repeated in every element (each GPU's links) once, with the largest count."""
    seen: list[int] = []

    def first(n: int) -> None:
        if not seen:
            seen.append(n)
            note(n)
    return first


def _cut_kinds(data: Any, notes: list[str]) -> Any:
    """At most MAX_GPUS GPU functions and MAX_NICS network functions among the PCI devices: the
    topology matrices are (GPUs + NICs) squared."""
    from orchestrator.facts.normalize.pcie import _kind

    devices = data.get("devices") if isinstance(data, dict) else None
    caps = {"gpu": MAX_GPUS, "nic": MAX_NICS}
    if not isinstance(devices, list) or len(devices) <= min(caps.values()):
        return data  # no more devices than the smaller cap: none is cut, told without classifying each
    seen = {"gpu": 0, "nic": 0}
    kept = []
    for d in devices:
        kind = _kind(d.get("vendor"), d.get("class")) if isinstance(d, dict) else "other"
        if kind in caps:
            seen[kind] += 1
            if seen[kind] > caps[kind]:
                continue
        kept.append(d)
    for kind, what in (("gpu", "GPU functions"), ("nic", "network functions")):
        if seen[kind] > caps[kind]:
            notes.append(f"pcie: {seen[kind]} {what} reported, more than the {caps[kind]} a host is judged on; "
                         f"judged on the first {caps[kind]}")
    return data if len(kept) == len(devices) else {**data, "devices": kept}
