"""Fleet baselines: every measured figure of a host or GPU against the same figure of its class.

Gray failures are relative: a GPU at 88 % of its peers' P2P bandwidth, a host whose NCCL bus
bandwidth is 12 % under its class, a GPU 9 C hotter than its siblings at the same load pass every
absolute floor.  Here each figure (`METRICS`) is compared with its peers: the hosts of the same
topology class (verdict/classes.py), or a baseline file exported from a known-good fleet of that
class (`probe baseline RUN -o base.json`, `--baseline-file`).  The centre is the median, the
spread the median absolute deviation (x 1.4826, floored at 1 % of the median so that identical
peers do not turn a rounding step into a finding); a figure is a finding when it lies beyond its
row of `THRESHOLDS` (a share of the median, an absolute step, and `z` spreads) and at least
`min_hosts` / `min_gpus` peers measured the same thing.  Every finding names the class median and
the peer count.

Who a figure is compared with (each metric's `host` and `gpu`):
  the host    its figure (NCCL bus bandwidth; for a per-GPU figure, the median of its GPUs) against
              the class's hosts (at least `min_hosts` other hosts);
  class       one GPU's figure against every GPU of the class (at least `min_gpus` GPUs on at least
              `min_hosts` other hosts), on hosts not already named as a whole for that figure;
  siblings    one GPU against the other GPUs of its own host (at least `min_gpus` of them): the same
              chassis, air and load - DCGM's node-level comparison of clocks, power and temperature.

Pure: `measures(facts)` when a host is judged (small: a few dozen numbers), `judge(...)` fleet-wide.
"""

from __future__ import annotations

import statistics
from array import array
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any, NamedTuple

from orchestrator.facts import read as F
from orchestrator.facts.model import Facts
from orchestrator.facts.shown import json_shown
from orchestrator.verdict import handoff, rules
from orchestrator.verdict.causes import Cause
from orchestrator.verdict.classes import descriptor, hardware_key, nominal_class
from orchestrator.verdict.findings import Finding, Located, Severity, fault, gpu_device
from orchestrator.verdict.rule import Unjudged

BANDWIDTH_LOW = rules.baseline.BANDWIDTH_LOW.id
CLOCKS_LOW = rules.baseline.CLOCKS_LOW.id
POWER_OUTLIER = rules.baseline.POWER_OUTLIER.id
TEMPERATURE_HIGH = rules.baseline.TEMPERATURE_HIGH.id
ERRORS_HIGH = rules.baseline.ERRORS_HIGH.id
FINDING_IDS: tuple[str, ...] = (BANDWIDTH_LOW, CLOCKS_LOW, POWER_OUTLIER, TEMPERATURE_HIGH, ERRORS_HIGH)

MAD_SCALE = 1.4826  # MAD x this estimates the standard deviation of normally spread figures
SPREAD_FLOOR = 0.01  # of the median: the least spread assumed, so identical peers are not infinitely strict
# Corrected-error rates are judged only over this much uptime: a count over an hour says little.
RATE_MIN_UPTIME_S = 6 * 3600.0
NCCL_MIN_BYTES = 1 << 20  # smaller all_reduce messages measure latency, not bandwidth


@dataclass(frozen=True)
class Metric:
    key: str
    what: str
    unit: str
    finding: str
    direction: str  # low | high | both
    host: bool  # the host's figure against the class's hosts
    gpu: str  # each GPU's figure against: "class" (the class's GPUs), "siblings" (its host's), "" (none)


@dataclass(frozen=True)
class Threshold:
    pct: float | None = None  # beyond this share of the median (percent)
    delta: float | None = None  # and beyond this absolute step (the metric's unit)
    z: float = 3.0  # and beyond this many robust spreads
    min_hosts: int = 4  # peer hosts needed for a host's figure
    min_gpus: int = 7  # peer GPUs needed for a GPU's figure (its siblings, where it is compared with them)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("pct", self.pct), ("delta", self.delta), ("z", self.z),
                                  ("min_hosts", self.min_hosts), ("min_gpus", self.min_gpus)) if v is not None}


# Every figure compared, and the one table of its thresholds (a playbook's `baselines:` overrides a
# row, key by key: api/playbook.py).  SuperBench calls a figure 5 % below its baseline a finding;
# Megatron a rank beyond 1 sigma and 10 %; DCGM clocks and power outside a band around the mean.
METRICS: tuple[Metric, ...] = (
    Metric("p2p_pair_gbps", "GPU pair copy", "GB/s", BANDWIDTH_LOW, "low", True, "class"),
    Metric("h2d_gbps", "host->GPU copy", "GB/s", BANDWIDTH_LOW, "low", True, "class"),
    Metric("d2h_gbps", "GPU->host copy", "GB/s", BANDWIDTH_LOW, "low", True, "class"),
    Metric("local_copy_gbps", "device-local copy", "GB/s", BANDWIDTH_LOW, "low", True, "class"),
    Metric("nccl_busbw_gbps", "NCCL bus bandwidth", "GB/s", BANDWIDTH_LOW, "low", True, ""),
    Metric("sm_clock_mhz", "SM clock under load", "MHz", CLOCKS_LOW, "low", True, "siblings"),
    Metric("power_w", "power under load", "W", POWER_OUTLIER, "both", True, "siblings"),
    Metric("temperature_c", "temperature", "°C", TEMPERATURE_HIGH, "high", False, "siblings"),
    Metric("ecc_corrected_per_day", "corrected ECC errors per day", "/day", ERRORS_HIGH, "high", True, "class"),
    Metric("pcie_replays_per_day", "PCIe replays per day", "/day", ERRORS_HIGH, "high", True, "class"),
)
BY_KEY: dict[str, Metric] = {m.key: m for m in METRICS}
THRESHOLDS: dict[str, Threshold] = {
    "p2p_pair_gbps": Threshold(pct=5.0),
    "h2d_gbps": Threshold(pct=5.0),
    "d2h_gbps": Threshold(pct=5.0),
    "local_copy_gbps": Threshold(pct=5.0),
    "nccl_busbw_gbps": Threshold(pct=5.0),
    # GPUs against their siblings (the same chassis and load): at least 3 of them
    "sm_clock_mhz": Threshold(pct=5.0, min_gpus=3),
    "power_w": Threshold(pct=10.0, min_gpus=3),
    "temperature_c": Threshold(delta=7.0, min_gpus=3),
    "ecc_corrected_per_day": Threshold(delta=10.0),
    "pcie_replays_per_day": Threshold(delta=10.0),
}
THRESHOLD_KEYS = ("pct", "delta", "z", "min_hosts", "min_gpus")


def thresholds_with(overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Threshold]:
    """THRESHOLDS with a playbook's overrides ({metric: {pct: 8, min_hosts: 3}}), validated by the
    playbook loader (api/playbook.py)."""
    out = dict(THRESHOLDS)
    for key, fields in overrides.items():
        out[key] = replace(out[key], **dict(fields))
    return out


class Measure(NamedTuple):
    """One measured figure of a host: per GPU (`gpu`: its bus id) or of the whole host (None).
    A tuple, not an object with a __dict__: the controller holds every host's few dozen of them
    until the fleet baselines are judged (a third of the memory a host's verdict took)."""

    metric: str
    kind: str  # what splits the metric further: the pair's link ("NV18"), NCCL's op and size
    gpu: str | None
    value: float


class Measures(Sequence[Measure]):
    """A host's measured figures as the controller holds them until the fleet baselines are judged:
    what was measured (metric, kind, GPU), the same on every host of a model and so held once for
    all of them (handoff.Shared), and the values in one array.  As Measure tuples the figures were
    5.7 of a DGX host's 19 KB verdict; so they are about 0.5."""

    __slots__ = ("_keys", "_values")

    def __init__(self, measures: Iterable[Measure] = ()) -> None:
        ms = list(measures)
        self._keys = handoff.Shared((m.metric, m.kind, m.gpu) for m in ms)
        self._values = array("d", (m.value for m in ms))

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(self)[i]
        metric, kind, gpu = self._keys[i]
        return Measure(metric, kind, gpu, self._values[i])

    def __iter__(self) -> Iterator[Measure]:
        for (metric, kind, gpu), value in zip(self._keys, self._values):
            yield Measure(metric, kind, gpu, value)

    def rows(self) -> list[tuple[str, str, str | None, float]]:
        """The figures as plain (metric, kind, gpu, value) tuples: the fleet baselines read every
        host's figures three times, and a Measure made for each was most of their cost."""
        return [(*key, value) for key, value in zip(self._keys, self._values)]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Measures):
            return self._keys == other._keys and self._values == other._values
        return isinstance(other, list) and list(self) == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Measures({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _measures_from, (self._keys, self._values)


def _measures_from(keys: handoff.Shared, values: array) -> Measures:
    out = Measures.__new__(Measures)
    out._keys, out._values = keys, values
    return out


# ----------------------------------------------------------------------------- measuring


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _p2p(facts: Facts) -> Iterable[Measure]:
    p2p = facts.get("p2p")
    if not isinstance(p2p, dict):
        return
    gpus = [g for g in p2p.get("gpus") or [] if isinstance(g, dict) and g.get("status") == "ok" and g.get("bus_id")]
    for g in gpus:
        bus = str(g["bus_id"])
        for metric, key in (("h2d_gbps", "h2d_gbps"), ("d2h_gbps", "d2h_gbps"), ("local_copy_gbps", "local_ce_gbps")):
            v = _num(g.get(key))
            if v is not None:
                yield Measure(metric, "", bus, v)
        load = g.get("load")
        if isinstance(load, dict):
            for metric in ("sm_clock_mhz", "power_w"):
                v = _num(load.get(metric))
                if v is not None:
                    yield Measure(metric, "", bus, v)
    levels = F.level_matrix(facts) or {}
    by_gpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    for p in p2p.get("pairs") or []:
        if not isinstance(p, dict) or not p.get("peer_enabled") or p.get("staged"):
            continue
        v = _num(p.get("ce_gbps"))
        src, dst = str(p.get("src_bus_id") or ""), str(p.get("dst_bus_id") or "")
        if v is None or not src or not dst:
            continue
        kind = levels.get((src, dst)) or levels.get((dst, src)) or "P2P"
        by_gpu[(src, kind)].append(v)
        by_gpu[(dst, kind)].append(v)
    for (bus, kind), values in by_gpu.items():
        # a GPU's pairs of one link kind: the median, so one slow partner does not make it slow
        yield Measure("p2p_pair_gbps", kind, bus, statistics.median(values))


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def _nccl(facts: Facts) -> Iterable[Measure]:
    nccl = facts.get("nccl")
    if not isinstance(nccl, dict) or nccl.get("limitation") or nccl.get("busy_gpus"):
        return
    for r in nccl.get("results") or []:
        if not isinstance(r, dict) or r.get("in_place") or not isinstance(r.get("size_bytes"), int):
            continue
        v = _num(r.get("busbw_gbps"))
        if v is not None and r["size_bytes"] >= NCCL_MIN_BYTES:
            yield Measure("nccl_busbw_gbps", f"{r.get('op') or 'collective'} {_size(r['size_bytes'])}", None, v)


def _gpus(facts: Facts) -> Iterable[Measure]:
    gpus = facts.get("gpus")
    listed = [g for g in (gpus.get("list") if gpus else None) or [] if isinstance(g, dict) and g.get("bus_id")]
    p2p = facts.get("p2p")
    loaded = {str(g.get("bus_id")): _num((g.get("load") or {}).get("temperature_c"))
              for g in (p2p.get("gpus") if isinstance(p2p, dict) else None) or [] if isinstance(g, dict)}
    # one host's GPUs are compared at one load: all under the probe's load, else all idle
    under_load = bool(loaded) and all(loaded.get(str(g["bus_id"])) is not None for g in listed)
    for g in listed:
        bus = str(g["bus_id"])
        t = loaded.get(bus) if under_load else _num(g.get("temperature_c"))
        if t is not None:
            yield Measure("temperature_c", "under load" if under_load else "idle", bus, t)
    host = facts.get("host")
    uptime = _num(host.get("uptime_s")) if host else None
    if uptime is None or uptime < RATE_MIN_UPTIME_S:
        return
    days = uptime / 86400.0
    for g in listed:
        bus = str(g["bus_id"])
        locations = ((g.get("ecc") or {}).get("locations") or {})
        counts = [_num((locations.get(loc) or {}).get("volatile_corrected")) for loc in ("dram", "sram")]
        if any(c is not None for c in counts):
            yield Measure("ecc_corrected_per_day", "", bus, round(sum(c or 0.0 for c in counts) / days, 2))
        replays = _num(g.get("pcie_replays"))
        if replays is not None:
            yield Measure("pcie_replays_per_day", "", bus, round(replays / days, 2))


def measures(facts: Facts) -> Measures:
    """Every figure of the host the baselines compare (what its probes measured)."""
    return Measures([*_p2p(facts), *_nccl(facts), *_gpus(facts)])


# ----------------------------------------------------------------------------- statistics


@dataclass(frozen=True)
class Stats:
    median: float
    mad: float
    n: int  # how many measured it (hosts or GPUs)

    @property
    def spread(self) -> float:
        return max(self.mad * MAD_SCALE, abs(self.median) * SPREAD_FLOOR)

    def to_dict(self) -> dict[str, Any]:
        return {"median": round(self.median, 4), "mad": round(self.mad, 4), "n": self.n}

    @classmethod
    def of(cls, values: list[float]) -> Stats:
        med = statistics.median(values)
        return cls(med, statistics.median(abs(v - med) for v in values), len(values))


def beyond(value: float, stats: Stats, metric: Metric, t: Threshold) -> bool:
    """Whether `value` lies beyond the threshold in the metric's bad direction."""
    dev = _deviation(value, stats.median, metric, t)
    return dev is not None and dev >= t.z * stats.spread


def _deviation(value: float, median: float, metric: Metric, t: Threshold) -> float | None:
    """How far `value` lies from `median` in the metric's bad direction, where that is at least
    the threshold's pct and delta; None where it is not (then the spread need not be known)."""
    dev = value - median
    if metric.direction == "low":
        dev = -dev
    elif metric.direction == "both":
        dev = abs(dev)
    if dev <= 0:
        return None
    if t.pct is not None and dev < abs(median) * t.pct / 100.0:
        return None
    if t.delta is not None and dev < t.delta:
        return None
    return dev


# ----------------------------------------------------------------------------- the baseline file

BASELINE_FORMAT = "fleetprobe-baseline/1"


@dataclass(frozen=True)
class ClassStats:
    """A class's figures: (metric, kind) -> stats of its hosts' and of its GPUs' values."""

    name: str
    hosts: int
    host: Mapping[tuple[str, str], Stats]
    gpu: Mapping[tuple[str, str], Stats]


@dataclass(frozen=True)
class Reference:
    """A baseline exported from a known-good fleet: class fingerprint -> its figures."""

    classes: Mapping[str, ClassStats]
    source: str  # the file, and the run it was made from

    def of(self, peers: str | None, fingerprint: str | None = None) -> ClassStats | None:
        """The figures of a host's peers: its hardware key (files made since issue 47), else its
        class fingerprint (older files, keyed by class)."""
        return self.classes.get(peers or "") or self.classes.get(fingerprint or "")


def class_stats(name: str, hosts: Mapping[str, Sequence[Measure]]) -> ClassStats:
    """The figures of one class's hosts (host -> its measures)."""
    host_values: dict[tuple[str, str], list[float]] = defaultdict(list)
    gpu_values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for ms in hosts.values():
        rows = _rows(ms)
        for key, values in _host_figures(rows).items():
            host_values[key].append(statistics.median(values))
        for metric, kind, gpu, value in rows:
            if gpu is not None:
                gpu_values[(metric, kind)].append(value)
    return ClassStats(name, len(hosts), {k: Stats.of(v) for k, v in host_values.items()},
                      {k: Stats.of(v) for k, v in gpu_values.items()})


_Row = tuple[str, str, "str | None", float]  # a Measure's fields, without building one


def _rows(ms: Sequence[Measure]) -> Sequence[_Row]:
    return ms.rows() if isinstance(ms, Measures) else ms  # a Measure is such a tuple


def _host_figures(rows: Iterable[_Row]) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for metric, kind, _, value in rows:
        out[(metric, kind)].append(value)
    return out


def _key(metric: str, kind: str) -> str:
    return f"{metric}[{kind}]" if kind else metric


def _unkey(text: str) -> tuple[str, str]:
    if text.endswith("]") and "[" in text:
        metric, kind = text[:-1].split("[", 1)
        return metric, kind
    return text, ""


def export(classes: Mapping[str, ClassStats], made_from: str, made: str) -> dict[str, Any]:
    """The baseline file (`probe baseline RUN -o base.json`): per class fingerprint its figures."""
    return {
        "format": BASELINE_FORMAT, "made_from": made_from, "made": made,
        "thresholds": {k: t.to_dict() for k, t in THRESHOLDS.items()},
        "classes": {fp: {"name": c.name, "hosts": c.hosts,
                         "host": {_key(*k): s.to_dict() for k, s in sorted(c.host.items())},
                         "gpu": {_key(*k): s.to_dict() for k, s in sorted(c.gpu.items())}}
                    for fp, c in sorted(classes.items())},
    }


class BaselineError(ValueError):
    """A baseline file that cannot be used; the message names what is wrong."""


# Bounds of a baseline file's figures.  Every metric compared is a bandwidth, a clock, a power, a
# temperature or a rate of errors: never below zero, and none near a billion in its unit.
FIGURE_MAX = 1e9
COUNT_MAX = 10_000_000  # hosts or GPUs a figure was measured on: more than any fleet
FILE_LIMIT = 16 << 20  # bytes of a baseline file: a few hundred classes of every figure fit in far less


def _figure(v: Any, where: str) -> float:
    # compared before converted: float() of a 4,000-digit integer raises OverflowError
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= FIGURE_MAX:
        return float(v)
    raise BaselineError(f"{where}: {_shown(v)} is not a number from 0 to {FIGURE_MAX:g}")


def _count(v: Any, where: str, least: int) -> int:
    if isinstance(v, int) and not isinstance(v, bool) and least <= v <= COUNT_MAX:
        return v
    raise BaselineError(f"{where}: {_shown(v)} is not a whole number from {least} to {COUNT_MAX:,}")


def _shown(v: Any) -> str:
    """A value as the file writes it (null, "12"), an integer of hundreds of digits by its size."""
    if isinstance(v, int) and v.bit_length() > 1000:
        return "an integer of more than 300 digits"
    return json_shown(v, 40)


def _stats(d: Any, where: str) -> Stats:
    if not isinstance(d, dict) or not all(k in d for k in ("median", "mad", "n")):
        raise BaselineError(f"{where}: each figure needs median, mad and n")
    return Stats(_figure(d["median"], f"{where} median"), _figure(d["mad"], f"{where} mad"),
                 _count(d["n"], f"{where} n", 1))


def parse_reference(doc: Any, source: str) -> Reference:
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_FORMAT:
        raise BaselineError(f"{source}: not a baseline file (its format must be {BASELINE_FORMAT!r}; "
                            "make one with `probe baseline RUN -o FILE`)")
    classes = {}
    raw = doc.get("classes")
    if not isinstance(raw, dict):
        raise BaselineError(f"{source}: classes must map class fingerprints to their figures")
    for fp, c in raw.items():
        if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"].isprintable() \
                or not 0 < len(c["name"]) <= 200:
            raise BaselineError(f"{source}: class {fp[:80]}: needs a name (one line of at most 200 characters)")
        parts = {}
        for scope in ("host", "gpu"):
            figures = c.get(scope) or {}
            if not isinstance(figures, dict):
                raise BaselineError(f"{source}: class {fp}: {scope} must map figures to their statistics")
            parts[scope] = {_unkey(str(k)): _stats(v, f"{source}: class {fp} {k}") for k, v in figures.items()
                            if _unkey(str(k))[0] in BY_KEY}
        hosts = c.get("hosts")
        hosts = 0 if hosts is None else _count(hosts, f"{source}: class {fp} hosts", 0)
        classes[str(fp)] = ClassStats(c["name"], hosts, parts["host"], parts["gpu"])
    made_from = doc.get("made_from")
    return Reference(classes, f"{source} (from run {made_from})" if isinstance(made_from, str) else source)


# ----------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judged:
    name: str
    fingerprint: str | None
    class_name: str | None
    measures: Sequence[Measure]
    hardware: str | None = None  # classes.hardware_key: whom its figures are compared with

    @property
    def peers(self) -> str | None:
        """The key of the host's peer group: its hardware, else (not known) its class."""
        return self.hardware or self.fingerprint


ThresholdsFor = Callable[[str], Mapping[str, Threshold]]


def _subject(m: Metric, kind: str, gpu: str | None, index: Mapping[str, int]) -> Located:
    """The measure as a finding's subject: its text, and the GPU it was taken on (none: the host's)."""
    what = f"{m.what} {kind}".strip() if m.key != "temperature_c" else f"{m.what} ({kind})"
    if gpu is None:
        return Located(what)
    i = index.get(gpu)
    return Located(f"GPU{i if i is not None else '?'} ({gpu}) {what}", (gpu_device({"index": i, "bus_id": gpu}),))


_METRIC = "baseline metric "  # a baseline finding's evidence names its figure after this


def figure_of(f: Finding) -> tuple[str, str | None]:
    """A baseline finding's figure: (its metric and kind as its evidence names them,
    "temperature_c[under load]"; the bus id of the GPU it was taken on, from its devices, None for
    the host's).  A finding stored before the kind was named gives its metric alone."""
    key = next((e[len(_METRIC):] for e in f.evidence if isinstance(e, str) and e.startswith(_METRIC)), "")
    gpu = next((b for d in f.devices for b in d.bus_ids()), None)
    return key, gpu


def figure_text(key: str) -> str:
    """"temperature_c[under load]" -> "temperature (under load)", as a subject says it."""
    metric, kind = _unkey(key)
    m = BY_KEY.get(metric)
    return _subject(m, kind, None, {}).text if m is not None else key


def measured_figures(facts: Facts) -> frozenset[tuple[str, str | None]]:
    """Every figure of the host its facts hold, keyed as figure_of keys a finding: a finding of a
    figure this set lacks was not measured (drift neither resolves it nor calls it new)."""
    out: set[tuple[str, str | None]] = set()
    for metric, kind, gpu, _value in measures(facts).rows():
        for key in (_key(metric, kind), metric):  # the metric alone: a finding stored without its kind
            out.add((key, gpu))
            if BY_KEY[metric].host:
                out.add((key, None))
    return frozenset(out)


def _fig(value: float, unit: str) -> str:
    """A figure with its unit as every surface writes it: "44 °C", "400 /day", "361.2 GB/s"; one
    decimal where it says something, never "44.0 C" beside "58 °C"."""
    text = f"{value:.1f}".removesuffix(".0")
    return ("0" if text == "-0" else text) + f" {unit}"


def _finding(host: str, m: Metric, subject: Located, value: float, stats: Stats, peers: str, basis: str,
             t: Threshold, kind: str) -> Finding:
    dev = value - stats.median
    side = "below" if dev < 0 else "above"
    # a share where the threshold is one, else the step in the metric's unit (7 °C hotter); against a
    # median of 0 the step is the figure itself, said once ("400 /day above the median 0 /day")
    rel = (f"{abs(dev) / abs(stats.median) * 100:.0f} % {side}" if t.pct is not None and stats.median
           else f"{_fig(abs(dev), m.unit)} {side}")
    said = rel if _fig(abs(dev), m.unit) == _fig(value, m.unit) and not rel.endswith(f"% {side}") \
        else f"{_fig(value, m.unit)}, {rel}"
    rule = ", ".join(x for x in (f"{t.pct:g} %" if t.pct is not None else "",
                                 _fig(t.delta, m.unit) if t.delta is not None else "", f"{t.z:g} spreads") if x)
    return fault(m.finding, host, subject,
                 f"{said} the median {_fig(stats.median, m.unit)} of {peers} "
                 f"(spread {_fig(stats.spread, m.unit)}; the threshold is {rule})",
                 severity=Severity.WARN, expected=round(stats.median, 2), actual=round(value, 2),
                 evidence=[f"{basis}: median {stats.median:.2f} {m.unit}, MAD {stats.mad:.2f}, {stats.n} measured",
                           f"{_METRIC}{_key(m.key, kind)}"],
                 hint=_HINTS[m.finding])


_HINTS = {
    BANDWIDTH_LOW: "a gray failure: compare this GPU's or host's PCIe and NVLink links, error counters and "
                   "clocks with a peer's; reseat or inspect the slow part",
    CLOCKS_LOW: "the GPU runs slower than its peers under the same load: check cooling, power delivery and "
                "clock event reasons (`nvidia-smi -q -d PERFORMANCE`)",
    POWER_OUTLIER: "the GPU draws unlike its peers under the same load: check the power limit, cooling and "
                   "whether it throttles",
    TEMPERATURE_HIGH: "hotter than its siblings in the same chassis: check its fan, heatsink, airflow and "
                      "thermal paste",
    ERRORS_HIGH: "corrected errors well above its peers' rate precede uncorrected ones: watch the trend, run "
                 "`dcgmi diag -r 3`, plan a replacement",
}


def judge(hosts: list[Judged], thresholds_for: ThresholdsFor | None = None,
          reference: Reference | None = None) -> tuple[list[Finding], dict[str, dict[str, str]]]:
    """(findings, id -> host -> why not judged) for every host's figures against its class (or the
    reference's figures of that class)."""
    limits = thresholds_for or (lambda host: THRESHOLDS)
    groups = peer_groups(hosts)
    findings: list[Finding] = []
    judged: dict[str, set[str]] = defaultdict(set)  # id -> hosts with at least one figure judged
    for key, (name, members) in sorted(groups.items()):
        run_stats: ClassStats | None = None  # made once a host of the group is judged against the run
        for h in members:
            ref = reference.of(key, h.fingerprint) if reference else None
            if ref is not None and reference is not None:
                findings.extend(_judge_host(h, ref, True, f"baseline {reference.source}, class {ref.name}",
                                            limits(h.name), judged))
                continue
            run_stats = run_stats or class_stats(name, {p.name: p.measures for p in members})
            findings.extend(_judge_host(h, run_stats, False, f"class {name} in this run", limits(h.name), judged))
    not_judged: dict[str, dict[str, str]] = {fid: {} for fid in FINDING_IDS}
    for h in hosts:
        metrics = {row[0] for row in _rows(h.measures)}
        for fid in FINDING_IDS:
            if h.name in judged[fid]:
                continue
            if not any(BY_KEY[metric].finding == fid for metric in metrics):
                continue  # nothing measured: the host's own coverage says why (its probe did not run)
            not_judged[fid][h.name] = _sibling_shortage(h, fid) or _why_not_judged(h, groups, reference)
    return findings, not_judged


def _sibling_shortage(h: Judged, fid: str) -> str | None:
    """Why a finding whose every figure the host measured is compared with the host's own GPUs
    alone (temperature) was not judged: too few of them, whatever its peers."""
    rows = [row for row in _rows(h.measures) if BY_KEY[row[0]].finding == fid]
    if any(BY_KEY[metric].host or BY_KEY[metric].gpu != "siblings" for metric, *_ in rows):
        return None
    gpus = len({gpu for _, _, gpu, _ in rows if gpu})
    return (f"too few GPUs of this host measured the same figures ({gpus}): each GPU is compared with its "
            "siblings on the host (see the thresholds' min_gpus)")


def peer_groups(hosts: Iterable[Judged]) -> dict[str, tuple[str, list[Judged]]]:
    """Peer key (the hosts' hardware: verdict/classes.py:hardware_key) -> (the group's name, its
    classed hosts that measured something).  The name is its nominal class: the class most of its
    hosts have, so a host with one fault is compared with, and under the name of, its healthy peers."""
    members: dict[str, list[Judged]] = defaultdict(list)
    for h in hosts:
        if h.peers and h.measures:
            members[h.peers].append(h)
    return {key: (nominal_class(h.class_name for h in hs) or key, hs) for key, hs in members.items()}


def _why_not_judged(h: Judged, groups: Mapping[str, tuple[str, list[Judged]]], reference: Reference | None) -> str:
    if not h.peers:
        return "the host has no topology class (a shape probe did not finish or was not in this run)"
    name, members = groups.get(h.peers) or (h.class_name, [])
    ref = reference.of(h.peers, h.fingerprint) if reference else None
    if ref is not None and reference is not None:
        return (f"too few peers measured the same figures (the baseline file {reference.source} holds {ref.hosts} "
                f"host(s) of class {ref.name}; see the thresholds' min_hosts/min_gpus)")
    in_file = (f"; the baseline file {reference.source} holds no host of this hardware" if reference is not None
               else "")
    return (f"too few peers measured the same figures ({len(members)} host(s) of class {name} in this run, "
            f"counting every host of its GPU model, GPU count and board{in_file}; see the thresholds' "
            "min_hosts/min_gpus)")


def _judge_host(h: Judged, cls: ClassStats, from_file: bool, basis: str, limits: Mapping[str, Threshold],
                judged: dict[str, set[str]]) -> Iterable[Finding]:
    measured = _rows(h.measures)  # read here once for each of its figures
    # each figure's values by GPU with their places among the host's figures: a figure's metric,
    # thresholds and class figures are then looked up once for all its GPUs, and the findings
    # still come in the order of the figures
    by_gpu: dict[tuple[str, str], list[tuple[int, str | None, float]]] = defaultdict(list)
    for at, (metric, kind, gpu, value) in enumerate(measured):
        by_gpu[(metric, kind)].append((at, gpu, value))
    own = {key: [value for _, _, value in rows] for key, rows in by_gpu.items()}
    # "GPU3": the GPU's place in PCI order, which is NVML's index order
    index = {g: i for i, g in enumerate(sorted({row[2] for row in measured if row[2]}))}
    named_whole: set[tuple[str, str]] = set()
    for (metric_key, kind), values in sorted(own.items()):
        m, t = BY_KEY[metric_key], limits[metric_key]
        if not m.host:
            continue
        stats = cls.host.get((metric_key, kind))
        n_hosts = (stats.n if from_file else stats.n - 1) if stats else 0
        if stats is None or n_hosts < t.min_hosts:
            continue
        judged[m.finding].add(h.name)
        value = statistics.median(values)
        if beyond(value, stats, m, t):
            named_whole.add((metric_key, kind))
            of_gpus = f" (median of {len(values)} GPUs)" if m.gpu else ""
            yield _finding(h.name, m, Located(_subject(m, kind, None, index).text + of_gpus), value, stats,
                           f"{n_hosts} {cls.name} hosts" + (" of the baseline" if from_file else ""), basis, t,
                           kind)
    gpu_findings: list[tuple[int, Finding]] = []
    for (metric, kind), rows in by_gpu.items():
        m, t = BY_KEY[metric], limits[metric]
        if not m.gpu or (metric, kind) in named_whole:
            continue
        if m.gpu == "siblings":
            for at, gpu, value in rows:
                if gpu is None:
                    continue
                sibs = [v for _, g, v in rows if g != gpu]
                if len(sibs) < t.min_gpus:
                    continue
                judged[m.finding].add(h.name)
                if _deviation(value, statistics.median(sibs), m, t) is None:
                    continue  # close to its siblings' median: their spread (a second median) is not needed
                stats = Stats.of(sibs)
                if beyond(value, stats, m, t):
                    gpu_findings.append((at, _finding(h.name, m, _subject(m, kind, gpu, index), value, stats,
                                                 f"its {len(sibs)} sibling GPUs on this host",
                                                 "the host's other GPUs", t, kind)))
            continue
        found = cls.gpu.get((metric, kind))
        n = (found.n if from_file else found.n - 1) if found else 0
        # peers are other machines: a GPU is compared across its class only where enough other
        # hosts measured the figure too (the GPUs of one host share its slot, cooling and driver)
        host_stats = cls.host.get((metric, kind))
        other_hosts = (host_stats.n if from_file else host_stats.n - 1) if host_stats else 0
        if found is None or n < t.min_gpus or other_hosts < t.min_hosts:
            continue
        peers = f"{n} GPUs of class {cls.name}" + (" in the baseline" if from_file else "")
        for at, gpu, value in rows:
            if gpu is None:
                continue
            judged[m.finding].add(h.name)
            if beyond(value, found, m, t):
                gpu_findings.append((at, _finding(h.name, m, _subject(m, kind, gpu, index), value, found, peers, basis, t,
                                                          kind)))
    gpu_findings.sort(key=itemgetter(0))
    for _, finding in gpu_findings:
        yield finding


# A figure below its class often has a cause the host's own checks name (its rules' roots).
CAUSES: tuple[Cause, ...] = tuple(rules.baseline.causes())


def unjudged(facts: Facts, measured: Measures | None = None) -> dict[str, str]:
    """What a host's own facts hold back from the comparisons (verdict/coverage.py); too few peers
    is the fleet's to say (judge's not-judged table).  `measured`: measures(facts), where the
    caller has it already (judging a host needs it twice)."""
    have = {BY_KEY[m.metric].finding for m in (measures(facts) if measured is None else measured)}
    out = {}
    if CLOCKS_LOW not in have:
        out[CLOCKS_LOW] = out[POWER_OUTLIER] = "no reading under load (p2p probe 1.1 with NVML and load_s > 0)"
    if ERRORS_HIGH not in have:
        host = facts.get("host")
        up = _num(host.get("uptime_s")) if host else None
        out[ERRORS_HIGH] = ("no uptime read (host probe 1.2)" if up is None else
                            f"up {up / 3600:.1f} h: error rates are compared from {RATE_MIN_UPTIME_S / 3600:.0f} h of uptime"
                            if up < RATE_MIN_UPTIME_S else "no corrected-error counter read")
    if TEMPERATURE_HIGH not in have:
        out[TEMPERATURE_HIGH] = "no GPU temperature read"
    if BANDWIDTH_LOW not in have:
        out[BANDWIDTH_LOW] = "no bandwidth measured (p2p / nccl)"
    return out


# The comparisons a host's own facts may hold back (their rules say `held_back`).
HELD_BACK: dict[str, Unjudged] = {fid: unjudged for fid in FINDING_IDS}


# The hosts a class baseline is made of: those judged healthy or degraded (a failed, unreachable or
# incomplete host's figures are not what the class should look like).
BASELINE_HEALTH = ("healthy", "degraded")
# A figure the same run flagged is not known-good either, on a host otherwise fit to be a baseline:
# the figure's own finding, a finding CAUSES names as its root, or any finding of the probe that
# measured it (p2p's copies, NCCL's bus bandwidth).  A root of the other probe's family does not
# flag it: an NCCL environment override says nothing of a host->GPU copy.
_PROBE_OF = {"p2p_pair_gbps": "p2p.", "h2d_gbps": "p2p.", "d2h_gbps": "p2p.", "local_copy_gbps": "p2p.",
             "nccl_busbw_gbps": "nccl."}
_PROBES = frozenset(_PROBE_OF.values())
_ROOTS_OF: dict[str, frozenset[str]] = {fid: frozenset(c.root for c in CAUSES if c.consequence == fid)
                                        for fid in FINDING_IDS}


def flagged_figures(finding_ids: Iterable[str]) -> dict[str, str]:
    """metric -> the finding (of a host's warn and fail findings, `finding_ids`) that keeps the
    host's figure of that metric out of a known-good baseline."""
    ids = sorted(set(finding_ids))
    out: dict[str, str] = {}
    for m in METRICS:
        probe = _PROBE_OF.get(m.key)
        others = tuple(p for p in _PROBES if p != probe)
        hit = next((fid for fid in ids if fid == m.finding or (probe is not None and fid.startswith(probe))
                    or (fid in _ROOTS_OF[m.finding] and not fid.startswith(others))), None)
        if hit is not None:
            out[m.key] = hit
    return out


@dataclass(frozen=True)
class LeftOut:
    """Why a host, or some of its figures (`whole` False), is not in a baseline file."""

    why: str
    whole: bool = True

    def __str__(self) -> str:
        return self.why


def _fit_figures(ms: Measures, flagged: Iterable[str]) -> tuple[Measures, LeftOut | None]:
    """A host's figures less those the run flagged, and what was left out (None: nothing)."""
    bad = flagged_figures(flagged)
    if not bad or not any(m.metric in bad for m in ms):
        return ms, None
    kept = Measures(m for m in ms if m.metric not in bad)
    named = ", ".join(f"{metric} ({fid})" for metric, fid in bad.items() if any(m.metric == metric for m in ms))
    return kept, LeftOut(f"the run flagged its figures {named}", whole=not kept)


def class_baseline(hosts: Iterable[tuple[str, str | None, str | None, str, Facts]], made_from: str, made: str,
                   flagged: Mapping[str, Iterable[str]] | None = None
                   ) -> tuple[dict[str, Any], dict[str, LeftOut]]:
    """The baseline file of a judged run (`probe baseline RUN -o FILE`) from (host, fingerprint,
    class, health, facts), and host -> what of it was left out and why.  `flagged`: host -> the ids
    of its warn and fail findings (a figure they flag is left out: flagged_figures)."""
    members: dict[str, dict[str, Measures]] = defaultdict(dict)
    names: dict[str, list[str]] = defaultdict(list)
    left_out: dict[str, LeftOut] = {}
    for name, fp, cls, health, facts in hosts:
        if health not in BASELINE_HEALTH:
            left_out[name] = LeftOut(f"its health is {health}")
            continue
        if not fp:
            left_out[name] = LeftOut("it has no topology class")
            continue
        ms, dropped = _fit_figures(measures(facts), (flagged or {}).get(name, ()))
        if dropped is not None:
            left_out[name] = dropped
        if not ms:
            left_out.setdefault(name, LeftOut("it measured nothing the baselines compare"))
            continue
        key = hardware_key(descriptor(facts)) or fp  # the same peers as the run judged it with
        members[key][name] = ms
        names[key].append(cls or fp)
    classes = {key: class_stats(nominal_class(names[key]) or key, hs) for key, hs in members.items()}
    return export(classes, made_from, made), left_out
