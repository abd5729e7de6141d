"""Topology fingerprints: what a host *is*, stable across identical machines; classes and outliers.

The descriptor keeps shape (GPU model and count, link classes, NVSwitches, NICs per GPU and their
levels, GPU PCIe gen/width, board model) and drops identity (serials, UUIDs, bus numbers).  Hosts
with one descriptor form a class; within a family (same GPU model, or same board when GPU-less), a
host whose descriptor differs from the family's majority is an outlier with the differences named.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.facts.gpu_models import link_resting
from orchestrator.facts.model import (
    Facts,
    GpuMig,
    GpuPcie,
    GpuRecord,
    GpusFacts,
    HostBoard,
    HostFacts,
    HostVirtualization,
    NvlinkFacts,
    NvlinkGpu,
    PcieFacts,
    TopologyFacts,
)
from orchestrator.facts.shown import shown
from orchestrator.facts.textsafe import is_digits
from orchestrator.verdict import rules
from orchestrator.verdict.causes import Cause
from orchestrator.verdict.findings import Finding, Severity, fault

_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}


def _most_common(values: list[Any]) -> Any:
    return Counter(values).most_common(1)[0][0] if values else None


def _pcie_shape(p: GpuPcie | Mapping[str, Any]) -> str:
    # a link resting at a lower speed while idle is the hardware of its peers: its class is theirs
    gen = p.get("gen_max") if link_resting(p) else p.get("gen_current")
    width = p.get("width_current")
    return f"Gen{gen if gen is not None else '?'}x{width if width is not None else '?'}"


def _gpu_count(section: GpusFacts | Mapping[str, Any], listed: int) -> int | str:
    """The host's GPU count: the section's count when it says more than the list describes (a
    `-q` excerpt), "N+" when only a lower bound is known (`nvlink -s -i N`), else the list."""
    count, at_least = section.get("count"), section.get("count_at_least")
    if isinstance(count, int) and count > listed:
        return count
    if count is None and isinstance(at_least, int):
        return f"{at_least}+"
    return listed


def _mig_on(mig: GpuMig | None) -> bool:
    return bool(mig.get("current")) if mig else False


def descriptor(facts: Facts) -> dict[str, Any] | None:
    gsec: GpusFacts | Mapping[str, Any] = facts.get("gpus") or {}
    gpus: list[GpuRecord] = gsec.get("list") or []
    nvlink: NvlinkFacts | Mapping[str, Any] = facts.get("nvlink") or {}
    topo: TopologyFacts | Mapping[str, Any] = facts.get("topology") or {}
    host: HostFacts | Mapping[str, Any] = facts.get("host") or {}
    pcie: PcieFacts | Mapping[str, Any] = facts.get("pcie") or {}
    if not gpus and not host:
        return None
    board: HostBoard | Mapping[str, Any] = host.get("board") or {}
    virtualization: HostVirtualization | Mapping[str, Any] = host.get("virtualization") or {}
    links: list[NvlinkGpu] = nvlink.get("gpus") or []
    d: dict[str, Any] = {
        "gpu_model": _most_common([g.get("model") or g.get("name") for g in gpus]),
        "gpu_count": _gpu_count(gsec, len(gpus)),
        "board": board.get("model") or board.get("product"),
        "virtualized": bool(virtualization.get("virtualized")),
        "mig": any(_mig_on(g.get("mig")) for g in gpus),
        "gpu_pcie": sorted(_pcie_shape(g.get("pcie") or {}) for g in gpus),  # per GPU: two slow links differ from one
        # a text import lists GPUs whose links it did not see (links_up null): unknown, not 0 links
        "nvlink_links_up": sorted(g.get("links_up") or 0 for g in links
                                  if not (nvlink.get("origin") == "text" and g.get("links_up") is None)),
        "nvswitch_count": len(nvlink.get("nvswitches") or []),
    }
    devices = topo.get("devices") or []
    matrix = topo.get("matrix") or []
    gpu_idx = [i for i, dv in enumerate(devices) if dv.get("kind") == "gpu"]
    nic_idx = [i for i, dv in enumerate(devices) if dv.get("kind") == "nic"]
    if not devices and pcie:
        nics = [dv for dv in pcie.get("devices") or [] if dv.get("kind") == "nic"]
        d["nic_count"] = len(nics)
    else:
        d["nic_count"] = len(nic_idx)
    pair_levels: Counter[str] = Counter()
    nic_best: list[str] = []
    try:
        for a_pos, a in enumerate(gpu_idx):
            for b in gpu_idx[a_pos + 1:]:
                pair_levels[shown(matrix[a][b])] += 1
            levels = [shown(matrix[a][n]) for n in nic_idx if matrix[a][n]]
            nic_best.append(min(levels, key=lambda v: _RANK.get(v, 9)) if levels else "none")
    except (IndexError, TypeError):
        pair_levels = Counter({"unknown": 1})
    d["gpu_pair_levels"] = dict(sorted(pair_levels.items()))
    d["gpu_nearest_nic"] = sorted(nic_best)
    return d


def digest(desc: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]


def _link_part(desc: dict[str, Any]) -> str | None:
    """The GPU-pair part of a class name: "NV18", "NV1/NV2", "NV4-pairs", "NV12-partial", "SYS"."""
    # a pair whose level the text does not give (topo -c alone) names no link class
    levels: dict[str, int] = {k: v for k, v in desc["gpu_pair_levels"].items() if k not in ("None", "?")}
    if not levels:
        return None
    if len(levels) == 1:
        return next(iter(levels))
    nv = sorted((lv for lv in levels if lv.startswith("NV")), key=lambda lv: int(lv[2:]) if is_digits(lv[2:]) else 0)
    if not nv:
        # PCIe only: name the spread, nearest first ("PIX/SYS"); more than three says little.
        pcie = sorted(levels, key=lambda lv: _RANK.get(lv, 9))
        return "/".join(pcie) if len(pcie) <= 3 else "mixed"
    nv_pairs = sum(levels[lv] for lv in nv)
    links_up = desc.get("nvlink_links_up") or []
    count = desc["gpu_count"]
    if len(nv) == 1 and isinstance(count, int) and count >= 2 and nv_pairs * 2 == count:
        return f"{nv[0]}-pairs"  # bridged pairs (workstation cards): each GPU bonded to exactly one peer
    if any(n == 0 for n in links_up) and any(n for n in links_up):
        return "/".join(nv) + "-partial"  # some GPUs have no NVLink at all while their peers do
    return "/".join(nv)  # e.g. the DGX-1 hybrid cube mesh: NV1 and NV2 pairs, the rest over PCIe


def class_name(desc: dict[str, Any]) -> str:
    parts: list[Any] = []
    if desc["gpu_count"]:
        parts.append(f"{desc['gpu_count']}x{desc['gpu_model'] or '?'}")  # unknown model: "?", never None
        link = _link_part(desc)
        if link:
            parts.append(link)
    else:
        parts.append(f"cpu-only-{desc.get('board') or 'unknown-board'}")
    if desc["nic_count"]:
        parts.append(f"{desc['nic_count']}NIC")
        nearest = set(desc["gpu_nearest_nic"])
        if len(nearest) == 1 and desc["gpu_count"]:
            parts.append(nearest.pop())
    if desc["mig"]:
        parts.append("MIG")
    if desc["virtualized"]:
        parts.append("VM")
    return "-".join(str(p).replace(" ", "_") for p in parts)


def _distinguish(desc: dict[str, Any], first: dict[str, Any], fp: str) -> str:
    """A suffix that tells a class apart from the bigger class of the same name: the board when it
    differs (another product of the same shape), else the odd PCIe links, else the digest."""
    if desc.get("board") != first.get("board") and desc.get("board"):
        return "@" + str(desc["board"]).replace(" ", "_")
    odd = sorted({p for p in desc.get("gpu_pcie") or [] if p not in (first.get("gpu_pcie") or [])})
    if odd:
        return "+" + "+".join(odd)
    near = sorted(set(desc.get("gpu_nearest_nic") or []) - set(first.get("gpu_nearest_nic") or []))
    if near:
        return "+NIC-" + "+".join(near)  # a NIC moved: some GPU now has one at another level
    return "~" + fp[:4]


def _show(value: Any) -> str:
    """Descriptor values as a person reads them: lists as counts ("7×18, 1×16"), maps as "NV18: 28"."""
    if isinstance(value, list):
        if not value:
            return "none"
        return ", ".join(f"{n}×{v}" for v, n in sorted(Counter(map(str, value)).items(), key=lambda kv: (-kv[1], kv[0])))
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    return str(value)


def _differing(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [k for k in sorted(b) if a.get(k) != b.get(k)]


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    return [f"{k}: {_show(a.get(k))} (class usual: {_show(b.get(k))})" for k in _differing(a, b)]


OUTLIER = rules.topology.CLASS_OUTLIER.id
# host -> the settings its inventory asks for that change its shape (MIG on: no NVLink between
# instances); hosts meant to differ are not one another's outliers.  Absent: nothing asked.
Intent = Mapping[str, Any]


def intended(mig: bool | None) -> Any:
    """A host's intent from its expectations: only MIG on is a shape asked for (mig: false, or
    nothing said, is the usual shape)."""
    return "MIG" if mig else None


# An outlier finding's evidence names each descriptor field it differs in, after this prefix.
_FIELD = "fingerprint descriptor: "


def differs_only_in(*fields: str) -> Callable[[Finding, Finding], bool]:
    """A cause's condition: the outlier differs from its class only in `fields`, what its root
    changes of a host (a down NVLink changes the links and pair levels, not the GPU count)."""
    allowed = frozenset(fields)

    def explains(_root: Finding, outlier: Finding) -> bool:
        named = {e[len(_FIELD):] for e in outlier.evidence if e.startswith(_FIELD)}
        return bool(named) and named <= allowed

    return explains


_GPU_GONE_FIELDS = ("gpu_count", "gpu_nearest_nic", "gpu_pair_levels", "gpu_pcie", "nvlink_links_up", "gpu_model")
_LINK_FIELDS = ("nvlink_links_up", "gpu_pair_levels")
# Which host faults make a host an outlier of its class (verdict/causes.py): one fault, one root.
CAUSES: tuple[Cause, ...] = (
    *(Cause(root, OUTLIER, when=differs_only_in(*_GPU_GONE_FIELDS))
      for root in (rules.gpu.COUNT_PCI_VS_NVML.id, rules.gpu.COUNT_PCI_VS_DRIVER.id, rules.gpu.LOST.id, rules.gpu.FALLEN_OFF_BUS.id,
                   rules.host.DRIVER_MISSING.id, rules.gpu.DRIVER_UNRESPONSIVE.id)),
    *(Cause(root, OUTLIER, when=differs_only_in(*_LINK_FIELDS))
      for root in (rules.nvlink.LINK_DOWN.id, rules.nvswitch.SXID.id, rules.nvlink.FABRIC_INCOMPLETE.id)),
    Cause(rules.nvlink.NVSWITCH_COUNT.id, OUTLIER, when=differs_only_in("nvswitch_count", *_LINK_FIELDS)),
    Cause(rules.pcie.LINK_DOWNGRADED.id, OUTLIER, when=differs_only_in("gpu_pcie")),
    Cause(rules.pcie.NIC_SHARED_SWITCH.id, OUTLIER, when=differs_only_in("gpu_nearest_nic")),
    Cause(rules.gpu.MIG_ENABLED.id, OUTLIER, when=differs_only_in("mig", *_LINK_FIELDS)),
)


def classify(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Finding]]:
    """Set record["fingerprint"]/["class"]; return the classes and the outlier findings."""
    classes, findings, of_host = classify_descriptors(
        [(rec["name"], descriptor(rec["facts"])) for rec in records])
    for rec in records:
        rec["fingerprint"], rec["class"] = of_host.get(rec["name"], (None, None))
    return classes, findings


def classify_descriptors(described: list[tuple[str, dict[str, Any] | None]], intent: Intent | None = None
                         ) -> tuple[list[dict[str, Any]], list[Finding], dict[str, tuple[str, str]]]:
    """Classes and outlier findings from (host, descriptor) pairs, and host -> (fingerprint, class).

    Works from descriptors alone so that a fleet judged host by host (in worker processes) can be
    classified without holding every host's facts."""
    descs: dict[str, dict[str, Any]] = {}
    members: dict[str, list[str]] = defaultdict(list)
    host_fp: dict[str, str] = {}
    for name, desc in described:
        if desc is None:
            continue
        fp = digest(desc)
        descs[fp] = desc
        members[fp].append(name)
        host_fp[name] = fp
    names: dict[str, str] = {}
    first_of: dict[str, str] = {}  # base name -> fingerprint of the biggest class that holds it
    taken: set[str] = set()
    # Bigger classes get the plain name; among equals, the class of the first host by name.
    for fp in sorted(members, key=lambda f: (-len(members[f]), min(members[f]), f)):
        base = class_name(descs[fp])
        if base not in first_of:
            first_of[base] = fp
            name = base
        else:
            name = base + _distinguish(descs[fp], descs[first_of[base]], fp)
            if name in taken:
                name = f"{base}~{fp[:4]}"
        taken.add(name)
        names[fp] = name
    outliers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    findings: list[Finding] = []
    for hosts, major in _compared_families(host_fp, descs, intent or {}):
        if major is None:
            continue
        major_fp, major_n = major
        for h in hosts:
            fp = host_fp[h]
            if fp == major_fp:
                continue
            diffs = _differences(descs[fp], descs[major_fp])
            outliers[major_fp].append({"host": h, "class": names[fp], "differences": diffs})
            findings.append(fault(
                OUTLIER, h, "topology",
                f"differs from {major_n} of {len(hosts)} similar hosts (class {names[major_fp]}): " + "; ".join(diffs),
                expected=names[major_fp], actual=names[fp], severity=Severity.WARN,
                evidence=[_FIELD + k for k in _differing(descs[fp], descs[major_fp])],
                hint="compare this host with its peers: a missing GPU, a down link or a moved NIC changes the shape"))
    classes = [{"name": names[fp], "fingerprint": fp, "descriptor": descs[fp], "members": members[fp],
                "outliers": outliers.get(fp, [])}
               for fp in sorted(members, key=lambda f: (-len(members[f]), names[f]))]
    return classes, findings, {name: (fp, names[fp]) for name, fp in host_fp.items()}


def _families(host_fp: dict[str, str], descs: dict[str, dict[str, Any]],
              intent: Intent) -> tuple[dict[Any, list[str]], list[str]]:
    """Families (hosts that should look alike) and the hosts that belong to none.  Hosts whose
    inventory asks for another setting (MIG on) are meant to look otherwise: another family."""
    families: dict[Any, list[str]] = defaultdict(list)
    unknown: list[str] = []
    for name, fp in host_fp.items():
        d = descs[fp]
        meant = intent.get(name)
        # Same GPU model on the same board: machines bought as one kind.  A different board is a
        # different product (its own class), not an outlier of this one.
        if d["gpu_count"] and not d["gpu_model"]:
            # GPUs of unknown model (topo -m prints no names): the NVLink generation its NV# cells
            # show (NV18, NV12, ...) stands in for the model; PCIe-only hosts have no peers then.
            nv = sorted(lv for lv in d["gpu_pair_levels"] if lv.startswith("NV"))
            if not nv:
                unknown.append(name)
                continue
            families[(f"?{nv[-1]}", d.get("board"), meant)].append(name)
            continue
        families[(d["gpu_model"] if d["gpu_count"] else "no-gpu", d.get("board"), meant)].append(name)
    return families, unknown


def _majority(hosts: list[str], host_fp: dict[str, str]) -> tuple[str, int] | None:
    """The family's usual shape (fingerprint, hosts with it), or None when nobody is the majority."""
    if len(hosts) < 3:
        return None  # with two machines nobody is the majority
    (major_fp, major_n), *rest = Counter(host_fp[h] for h in hosts).most_common()
    if rest and rest[0][1] == major_n:
        return None  # no strict majority: nothing to call an outlier against
    return major_fp, major_n


def _compared_families(host_fp: dict[str, str], descs: dict[str, dict[str, Any]],
                       intent: Intent) -> list[tuple[list[str], tuple[str, int] | None]]:
    families, _unknown = _families(host_fp, descs, intent)
    return [(hosts, _majority(hosts, host_fp)) for hosts in families.values()]


def outlier_not_judged(described: list[tuple[str, dict[str, Any] | None]],
                       intent: Intent | None = None) -> dict[str, str]:
    """host -> why topology.class.outlier could not be judged on it (no peers, no majority).
    Hosts without a descriptor are left to their probes' outcomes (verdict/coverage.py)."""
    host_fp = {name: digest(desc) for name, desc in described if desc is not None}
    descs = {digest(desc): desc for _name, desc in described if desc is not None}
    families, unknown = _families(host_fp, descs, intent or {})
    out = {h: "GPU model unknown: no similar hosts to compare with" for h in unknown}
    for hosts in families.values():
        if len(hosts) < 3:
            why = f"{len(hosts)} similar host(s) in this run: comparing needs at least 3"
        elif _majority(hosts, host_fp) is None:
            why = f"no majority shape among {len(hosts)} similar hosts"
        else:
            continue
        out.update(dict.fromkeys(hosts, why))
    return out


# ----------------------------------------------------------------------------- hardware peers

# What a host was bought as: the descriptor's fields that name the product (GPU model and count,
# board, bare metal or VM).  Every other field (links up, pair levels, PCIe shapes, NICs, NVSwitches,
# MIG) is a state a fault or a setting changes (CAUSES above names which fault changes which), so a
# host with one NVLink down is a class of one and still the same hardware as its peers.  A fault
# that changes one of these fields (a GPU NVML no longer lists) leaves the host with the hosts of
# that count: a peer group never mixes models, counts or boards.
HARDWARE_FIELDS = ("gpu_model", "gpu_count", "board", "virtualized")
_HARDWARE = "hw-"  # a hardware key is never read as a class fingerprint (baseline files hold both)


def hardware_key(desc: Mapping[str, Any] | None) -> str | None:
    """The key of the host's peers for the fleet baselines (verdict/baseline.py): its GPU model and
    count, board and virtualization.  GPUs of unknown model: the whole descriptor (its class's
    fingerprint), since equal counts of unknown GPUs may be different models."""
    if desc is None:
        return None
    if desc.get("gpu_count") and not desc.get("gpu_model"):
        return digest(dict(desc))
    return _HARDWARE + digest({k: desc.get(k) for k in HARDWARE_FIELDS})


def nominal_class(class_names: Iterable[str | None]) -> str | None:
    """The name of a group of same-hardware hosts: the topology class most of them have (the shape
    the hardware has when nothing is wrong); among equals, the first by name."""
    counts = Counter(n for n in class_names if n)
    return min(counts, key=lambda n: (-counts[n], n)) if counts else None


# ----------------------------------------------------------------------------- a class carried forward


@dataclass(frozen=True)
class CarriedClass:
    """A host's topology class as its last run that measured its shape said (issue 47): a partial
    run (`-p fabric`, `-p quick`, `--probe`) classes nothing itself and shows this, never as
    measured now.  Only for showing: outliers, baselines and drift use what this run measured."""

    name: str
    fingerprint: str
    run: str  # the run it was measured in

    def shown(self) -> str:
        return f"{self.name} (carried from run {self.run})"

    def to_dict(self) -> dict[str, str]:
        return {"class": self.name, "fingerprint": self.fingerprint, "run": self.run}

    @classmethod
    def from_dict(cls, d: Any) -> CarriedClass | None:
        """A stored entry, or None when it is not one (a hand-edited file)."""
        if not isinstance(d, dict) or not all(isinstance(d.get(k), str) and d[k] for k in ("class", "fingerprint", "run")):
            return None
        return cls(d["class"], d["fingerprint"], d["run"])


def carried_from(past: Iterable[tuple[str, Mapping[str, tuple[str | None, str | None]]]],
                 wanted: Iterable[str]) -> dict[str, CarriedClass]:
    """host -> its class in the newest past run that measured it.  `past`: (run id, host ->
    (fingerprint, class)) of earlier runs, newest first; a host that run did not class (not
    measured there, or only carried) is looked up in the run before."""
    need = set(wanted)
    out: dict[str, CarriedClass] = {}
    if not need:
        return out
    for run_id, classed in past:
        for host in sorted(need):
            fp, name = classed.get(host) or (None, None)
            if fp and name:
                out[host] = CarriedClass(name, fp, run_id)
        need -= set(out)
        if not need:
            break  # the runs before this one are not read
    return out
