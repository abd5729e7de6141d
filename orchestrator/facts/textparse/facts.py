"""Parsed text -> the normalized facts sections the live probes feed (gpus, nvlink, topology, pcie).

Shapes follow docs/facts-gpus.md and docs/facts-pcie.md so the same checks run on imported text.
Text cannot give everything a probe reads (bus ids in topo -m, NVLink remote ends, sysfs paths):
such fields are null with a reason in `unknown` / `<field>_unknown`, never filled from a guess.
Every section carries `origin: "text"`, `source: "text"` (except topology, whose `source` is the
per-cell matrix: there every cell says "text"), `source_files`, and `confidence: "low"` with the
list of fields text could not give (`low_confidence_fields`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.gpu_models import PCIE_SPEED_TEXT
from orchestrator.facts.normalize import gpus as gpus_normalize
from orchestrator.facts.normalize import kmsg as kmsg_normalize
from orchestrator.facts.normalize import nic as nic_normalize
from orchestrator.facts.normalize import nvlink as nvlink_normalize
from orchestrator.facts.normalize import pcie as pcie_normalize
from orchestrator.facts.normalize.budget import MAX_GPUS
from orchestrator.facts.numbers import INDEX, int_or_none
from orchestrator.facts.textparse.bench import BwLatency, NcclRun, NvBandwidth
from orchestrator.facts.textparse.bench_facts import nccl_from_runs, p2p_from_bwlat, p2p_from_nvbandwidth
from orchestrator.facts.textparse.common import Note
from orchestrator.facts.textparse.fabric_facts import fabric_from_text
from orchestrator.facts.textparse.ibstat import IbReport
from orchestrator.facts.textparse.kernel_log import KernelLog
from orchestrator.facts.textparse.lspci import (
    ACS_WORDS,
    CLASS_NAMES,
    PORT_NAMES,
    LinkInfo,
    LspciTree,
    LspciVerbose,
    PciDevice,
    TreeNode,
)
from orchestrator.facts.textparse.nvlink import CAP_KEYS, NvlinkReport
from orchestrator.facts.textparse.perftest import PerftestLog
from orchestrator.facts.textparse.smi import SmiList, SmiQuery
from orchestrator.facts.textparse.topo import CpuAffinity, P2PMatrix, TopoMatrix

NOT_IN_TEXT = "not in the imported text"
_P2P_MODES = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "pcie"}


@dataclass
class Parsed:
    """Everything parsed for one host, by kind.  Several files of one kind are merged by the importer."""

    topo: TopoMatrix | None = None
    p2p: list[P2PMatrix] = field(default_factory=list)
    cpu: CpuAffinity | None = None
    nvlink: list[NvlinkReport] = field(default_factory=list)
    smi_list: SmiList | None = None
    query: SmiQuery | None = None
    tree: LspciTree | None = None
    verbose: LspciVerbose | None = None
    kernel_log: list[KernelLog] = field(default_factory=list)
    ib: list[IbReport] = field(default_factory=list)
    bwlat: BwLatency | None = None
    nvbandwidth: list[NvBandwidth] = field(default_factory=list)
    nccl: list[NcclRun] = field(default_factory=list)
    perftest: list[PerftestLog] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # merge notes (disagreeing sources)

    def add(self, obj: Any) -> None:
        if isinstance(obj, TopoMatrix):
            self.topo = obj
        elif isinstance(obj, P2PMatrix):
            self.p2p.append(obj)
        elif isinstance(obj, CpuAffinity):
            if self.cpu is None:
                self.cpu = obj
            else:
                self.cpu.nearest.update(obj.nearest)
        elif isinstance(obj, NvlinkReport):
            self.nvlink.append(obj)
        elif isinstance(obj, SmiList):
            self.smi_list = obj
        elif isinstance(obj, SmiQuery):
            self.query = obj
        elif isinstance(obj, LspciTree):
            self.tree = obj
        elif isinstance(obj, LspciVerbose):
            self.verbose = obj
        elif isinstance(obj, KernelLog):
            self.kernel_log.append(obj)
        elif isinstance(obj, IbReport):
            self.ib.append(obj)
        elif isinstance(obj, BwLatency):
            self.bwlat = obj
        elif isinstance(obj, NvBandwidth):
            self.nvbandwidth.append(obj)
        elif isinstance(obj, NcclRun):
            self.nccl.append(obj)
        elif isinstance(obj, PerftestLog):
            self.perftest.append(obj)
        else:
            raise TypeError(f"not a parsed text result: {type(obj).__name__}")

    def sources(self, *objs: Any) -> list[str]:
        return sorted({o.source for o in objs if o is not None})


def _mark(section: dict[str, Any], files: list[str], low: list[str]) -> dict[str, Any]:
    section["origin"] = "text"
    section.setdefault("source", "text")
    section["source_files"] = files
    section["confidence"] = "low" if low else "normal"
    section["low_confidence_fields"] = sorted(set(low))
    return section


def _speed(gen: int | None) -> str | None:
    return PCIE_SPEED_TEXT.get(gen) if gen else None


# ---------------------------------------------------------------------------------------------
# facts["gpus"]


def _blank_gpu(index: int) -> dict[str, Any]:
    need_q = NOT_IN_TEXT + " (needs nvidia-smi -q or -q -x)"
    g: dict[str, Any] = {
        "index": index, "bus_id": None, "uuid": None, "name": None, "model": None, "serial": None,
        "board_part_number": None, "vbios": None, "pci_device_id": None, "memory_total_bytes": None,
        "memory_used_bytes": None, "architecture": None, "compute_capability": None, "persistence_mode": None,
        "compute_mode": None, "mig": None, "virtualization_mode": None, "pcie": None, "numa_node": None,
        # fans_unknown carries NVML-style reasons that checks judge (NOT_SUPPORTED = no fan); a
        # field absent from the text is not a sensor fault, so its reason lives in unknown only.
        "cpu_affinity": None, "temperature_c": None, "fans": None, "fans_unknown": None, "power_w": None,
        "ecc": None, "remapped_rows": None, "fabric": None, "lost": None, "display": None,
    }
    g["unknown"] = {k: need_q for k, v in g.items() if v is None and k not in ("fans_unknown",)}
    g["unknown"]["compute_capability"] = "nvidia-smi text does not print it"
    g["unknown"]["lost"] = "text cannot tell a lost GPU from a missing one"
    return g


def _known(g: dict[str, Any], key: str, value: Any, reason: str | None = None) -> None:
    if value is None:
        if reason:
            g["unknown"][key] = reason
        return
    g[key] = value
    g["unknown"].pop(key, None)


# the GPU's link as -q prints it (the host's maximum too, which the probe does not read)
_PCIE_KEYS = ("gen_current", "gen_max", "gen_gpu_max", "gen_host_max", "width_current", "width_max")


def _not_supported(why: str | None) -> bool:
    """nvidia-smi prints N/A / [Not Supported] where NVML answered NOT_SUPPORTED."""
    return bool(why and re.match(r"(N/A|\[?Not Supported\]?) in the source", why, re.I))


def _apply_query(g: dict[str, Any], q: Any) -> None:
    for key, attr in (("bus_id", "bus_id"), ("uuid", "uuid"), ("name", "name"), ("serial", "serial"),
                      ("board_part_number", "board_part_number"), ("vbios", "vbios"),
                      ("pci_device_id", "pci_device_id"), ("memory_total_bytes", "memory_total_bytes"),
                      ("memory_used_bytes", "memory_used_bytes"), ("architecture", "architecture"),
                      ("compute_capability", "compute_capability"), ("persistence_mode", "persistence_mode"), ("compute_mode", "compute_mode"),
                      ("virtualization_mode", "virtualization_mode"), ("temperature_c", "temperature_c"),
                      ("power_w", "power_w")):
        _known(g, key, getattr(q, attr), q.unknown.get(attr))
    g["module_id"] = q.module_id
    g["pcie_replays"] = q.pcie_replays
    # -q fields beyond the ones above (most of them the nvml probe does not read; the InfoROM image
    # it does): kept, null with a reason when not printed
    for key in ("minor_number", "c2c_mode", "bar1_total_bytes", "addressing_mode", "power_limit_w", "module_power_w",
                "memory_temperature_c", "inforom_image", "perf_state", "utilization_pct"):
        g[key] = getattr(q, key)
        if g[key] is None:
            g["unknown"][key] = q.unknown.get(key, NOT_IN_TEXT)
    if q.lost:  # the default screen: a GPU nvidia-smi could not reach (its handle), counted with its bus id
        g["lost"] = True
        g["unknown"].pop("lost", None)
    mig_instances = [{"index": m.index, "uuid": m.uuid, "name": None, "memory_total_bytes": m.memory_total_bytes,
                      "gpu_instance_id": m.gpu_instance_id} for m in q.mig_devices]
    mig = {"current": q.mig_current, "pending": q.mig_pending, "instances": mig_instances}
    for k, attr in (("current", "mig_current"), ("pending", "mig_pending")):
        if getattr(q, attr) is None:
            mig[f"{k}_unknown"] = q.unknown.get(attr, NOT_IN_TEXT)
    if q.mig_current is None and q.mig_pending is None and not mig_instances and _not_supported(q.unknown.get("mig_current")):
        g["unknown"]["mig"] = "NOT_SUPPORTED"  # a GPU without MIG: NVML's answer, as the probe records it
    else:
        _known(g, "mig", mig)
    # the probe's shape: the link as read, what was not printed named in pcie.unknown (speeds: the normalizer's)
    pcie = {k: getattr(q, f"pcie_{k}") for k in _PCIE_KEYS}
    pcie["unknown"] = {k: q.unknown.get(f"pcie_{k}", NOT_IN_TEXT) for k in _PCIE_KEYS if pcie[k] is None}
    _known(g, "pcie", pcie)
    if q.fan_speed_pct is not None:
        g["fans"], g["fans_unknown"] = [{"index": 0, "speed_pct": q.fan_speed_pct}], None
        g["unknown"].pop("fans", None)
    else:
        why = q.unknown.get("fan_speed_pct", NOT_IN_TEXT)
        # nvidia-smi prints N/A / [Not Supported] where NVML answered NOT_SUPPORTED.
        g["fans_unknown"] = "NOT_SUPPORTED" if _not_supported(why) else None
        g["unknown"]["fans"] = why
    ecc = {"mode_current": q.ecc_current, "volatile_uncorrected": q.ecc_volatile_uncorrected,
           "aggregate_uncorrected": q.ecc_aggregate_uncorrected, "aggregate_corrected": q.ecc_aggregate_corrected}
    for k, attr in (("mode_current", "ecc_current"), ("volatile_uncorrected", "ecc_volatile_uncorrected"),
                    ("aggregate_uncorrected", "ecc_aggregate_uncorrected"),
                    ("aggregate_corrected", "ecc_aggregate_corrected")):
        if getattr(q, attr) is None:
            ecc[f"{k}_unknown"] = q.unknown.get(attr, NOT_IN_TEXT)
    _known(g, "ecc", ecc)
    rr = [q.remapped_correctable, q.remapped_uncorrectable, q.remapped_pending, q.remapped_failure]
    if all(v is None for v in rr):
        g["unknown"]["remapped_rows"] = q.unknown.get("remapped_pending", NOT_IN_TEXT)
    else:
        _known(g, "remapped_rows", {"correctable": rr[0], "uncorrectable": rr[1], "pending": rr[2], "failure": rr[3]})
    if q.fabric_state is None:
        g["unknown"]["fabric"] = q.unknown.get("fabric_state", NOT_IN_TEXT)
    else:
        status = q.fabric_status.upper() if q.fabric_status else None
        _known(g, "fabric", {"state": q.fabric_state, "status": status, "clique_id": q.fabric_clique_id,
                             "cluster_uuid": q.fabric_cluster_uuid, "health_summary": None,
                             "health_summary_unknown": "not summarised in nvidia-smi text"})


def _bench_devices(p: Parsed) -> tuple[str, list[tuple[int, str | None, str | None]]] | None:
    """(tool, [(index, name, bus id)]) of the GPUs a benchmark lists for this host, if any."""
    if p.bwlat is not None and any(d.name for d in p.bwlat.devices):
        return "p2pBandwidthLatencyTest", [(d.index, d.name, d.bus_id) for d in p.bwlat.devices]
    for nvb in p.nvbandwidth:
        if nvb.devices:
            return "nvbandwidth", [(d.index, d.name, d.bus_id) for d in nvb.devices.values()]
    for run in p.nccl:
        if run.devices and run.complete and len(run.hosts) == 1:  # a trimmed list names some GPUs, not the host's
            return "nccl-tests", [(d["device"], d["name"], d["bus_id"]) for d in run.devices]
    return None


@dataclass
class _GpuBook:
    """The GPUs one host's texts describe, filled source by source: the GPU records by index, the
    count each source gives, the lower bound a partial listing gives, and merge notes."""

    by_index: dict[int, dict[str, Any]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    at_least: int | None = None

    def gpu(self, i: int) -> dict[str, Any]:
        if i not in self.by_index:
            self.by_index[i] = _blank_gpu(i)
        return self.by_index[i]


# where the GPU count comes from, most trusted first
_COUNT_SOURCES = ("nvidia-smi -q", "nvidia-smi", "nvidia-smi -L", "nvidia-smi topo -m", "p2pBandwidthLatencyTest", "nvbandwidth",
                  "nccl-tests")


def gpus_facts(p: Parsed) -> dict[str, Any] | None:
    bench = _bench_devices(p)
    if not (p.query or p.smi_list or p.topo or p.nvlink or p.p2p or bench or p.cpu):
        return None
    book = _GpuBook()
    # the order matters: later sources fill only the names and UUIDs earlier ones left, and topo -p2p
    # and benchmarks give a count only where no earlier source did
    _gpus_from_smi_list(book, p.smi_list)
    _gpus_from_topo(book, p.topo)
    _gpus_from_nvlink(book, p.nvlink)
    _gpus_lower_bound(book, p)
    _gpus_from_p2p(book, p.p2p)
    if bench is not None:
        _gpus_from_bench(book, bench)
    if p.query:
        _gpus_from_query(book, p.query)
    count = next((book.counts[src] for src in _COUNT_SOURCES if src in book.counts), None)
    if len(set(book.counts.values())) > 1:
        book.notes.append("GPU counts disagree: " + ", ".join(f"{k} {v}" for k, v in book.counts.items()))
    return _gpus_section(p, book, count, bench)


def _gpus_from_smi_list(book: _GpuBook, smi_list: SmiList | None) -> None:
    if not smi_list:
        return
    if not smi_list.partial:  # an elided or gapped -L is a lower bound (at_least below)
        book.counts["nvidia-smi -L"] = len(smi_list.gpus)
    for lg in smi_list.gpus:
        g = book.gpu(lg.index)
        _known(g, "name", lg.name)
        _known(g, "uuid", lg.uuid, lg.uuid_unknown)
        g["display"] = lg.display
        g["unknown"].pop("display", None)
        if lg.mig_devices:
            # -L lists MIG devices only while MIG mode is on; no devices listed says nothing.
            _known(g, "mig", {"current": True, "pending": None, "pending_unknown": NOT_IN_TEXT,
                              "instances": [{"index": m.index, "uuid": m.uuid, "name": f"MIG {m.profile}",
                                             "memory_total_bytes": None} for m in lg.mig_devices]})


def _gpus_from_topo(book: _GpuBook, topo: TopoMatrix | None) -> None:
    if not topo:
        return
    book.counts["nvidia-smi topo -m"] = len(topo.gpus)
    for d in topo.gpus:
        k = int_or_none(d.label[3:], INDEX)
        if k is None or k >= MAX_GPUS:  # `GPU99999...`: no GPU a host has
            continue
        g = book.gpu(k)
        _known(g, "cpu_affinity", d.cpu_affinity, d.unknown.get("cpu_affinity"))
        _known(g, "numa_node", d.gpu_numa_id, d.unknown.get("gpu_numa_id"))
        g["numa_affinity"] = d.numa_affinity


def _gpus_from_nvlink(book: _GpuBook, reports: list[NvlinkReport]) -> None:
    for rep in reports:
        for ng in rep.gpus:
            if ng.index is None:
                continue
            g = book.gpu(ng.index)
            _known(g, "name", g["name"] or ng.name)
            _known(g, "uuid", g["uuid"] or ng.uuid, "redacted in the source" if ng.uuid_redacted else None)


def _gpus_lower_bound(book: _GpuBook, p: Parsed) -> None:
    """The fewest GPUs the host has, from the texts that list part of them."""
    at_least: int | None = None
    if p.smi_list and p.smi_list.partial:
        at_least = max(lg.index for lg in p.smi_list.gpus) + 1  # indices run from 0
    if p.cpu is not None and p.topo is None:
        # topo -c names GPU indices; indices run from 0, so the highest named one bounds the count
        named = sorted({i for v in p.cpu.nearest.values() for i in v})
        for i in named:
            book.gpu(i)
        at_least = max([at_least or 0, (named[-1] + 1) if named else 0]) or None
    if p.nvlink:
        # `nvlink -s -i N` lists one GPU on purpose and a poster may paste part of it: the GPUs it
        # lists are a lower bound of the host's GPUs, never its count.
        at_least = max([at_least or 0, *(len({x.index for x in rep.gpus if x.index is not None}) for rep in p.nvlink)]) or None
    book.at_least = at_least


def _gpus_from_p2p(book: _GpuBook, matrices: list[P2PMatrix]) -> None:
    for pm in matrices:
        for lab in pm.labels:
            k = int_or_none(lab[3:], INDEX) if re.fullmatch(r"GPU\d+", lab) else None
            if k is not None and k < MAX_GPUS:
                book.gpu(k)
        if not book.counts:
            book.counts["nvidia-smi topo -p2p"] = sum(1 for lab in pm.labels if lab.startswith("GPU"))


def _gpus_from_bench(book: _GpuBook, bench: tuple[str, list[tuple[int, str | None, str | None]]]) -> None:
    # CUDA's view (CUDA_VISIBLE_DEVICES may hide GPUs): a count only when nothing else gives one
    tool, devs = bench
    if not book.counts:
        book.counts[tool] = len(devs)
    for idx, name, bus in devs:
        g = book.gpu(idx)
        _known(g, "name", g["name"] or name)
        _known(g, "bus_id", g["bus_id"] or bus)


def _gpus_from_query(book: _GpuBook, query: SmiQuery) -> None:
    uuid_to_index = {g["uuid"]: i for i, g in book.by_index.items() if g["uuid"]}
    for pos, qg in enumerate(query.gpus):
        # -q prints GPUs in index order; the UUID pins the index when another file lists it.
        idx = uuid_to_index.get(qg.uuid, qg.index if qg.index is not None else pos)
        if qg.uuid not in uuid_to_index and book.by_index:
            book.notes.append(f"-q block {pos} ({qg.bus_id}) matched to index {pos} by position")
        g = book.gpu(idx)
        if g["uuid"] and qg.uuid and g["uuid"] != qg.uuid:
            # Same index, different board: the files do not describe the same GPUs.
            book.notes.append(f"GPU{idx}: UUID {g['uuid']} in other files but {qg.uuid} in -q; -q block not merged")
            continue
        _apply_query(g, qg)
    if query.attached_gpus is not None:
        # also --query-gpu: its rows (or its count column); the default screen: its rows and the GPUs it could not reach
        book.counts["nvidia-smi" if query.screen else "nvidia-smi -q"] = query.attached_gpus
    if query.at_least is not None:
        book.at_least = max(book.at_least or 0, query.at_least)


def _gpu_model(g: dict[str, Any]) -> None:
    # by PCI device id where -q printed one, else by the exact product name (never a substring); a name
    # the default screen cut ("Tesla V100-SXM2...") only when every known name starting so is one model
    m = gpu_models.lookup(g["name"], g["pci_device_id"]) or gpu_models.lookup_cut(g["name"])
    _known(g, "model", m.key if m else None, None if g["name"] is None else "not in the model table")
    if g["name"] is None and m is None:
        g["unknown"]["model"] = "name unknown (this text does not print the GPU model)"
    if m is not None and m.display and g.get("display") is None:
        g["display"] = True
        g["unknown"].pop("display", None)


# what the nvml probe reads and no nvidia-smi text prints: named unknown in the payload
_PROBE_ONLY = ("clock_event_reasons", "retired_pages_pending", "power_limits", "violation_ns", "thermal",
               "recovery_action")
# the probe's per-GPU keys whose value the text record already holds in the probe's shape
_PROBE_KEYS = ("index", "bus_id", "uuid", "name", "serial", "board_part_number", "vbios", "pci_device_id",
               "memory_total_bytes", "memory_used_bytes", "architecture", "compute_capability", "persistence_mode",
               "compute_mode", "virtualization_mode", "numa_node", "cpu_affinity", "temperature_c", "power_w",
               "minor_number", "pcie_replays", "inforom_image", "mig", "fans", "ecc", "remapped_rows", "fabric", "lost")


def _probe_gpu(g: dict[str, Any]) -> dict[str, Any]:
    """One text GPU record as the nvml probe sends a GPU: its pcie reasons in `pcie.unknown`, fans'
    reason an NVML code only where nvidia-smi printed N/A (NOT_SUPPORTED), what text never shows
    named unknown."""
    unknown = dict(g["unknown"])
    unknown.update({k: NOT_IN_TEXT for k in _PROBE_ONLY})
    unknown.pop("fans", None)
    if g.get("fans_unknown"):
        unknown["fans"] = g["fans_unknown"]
    raw = {k: g.get(k) for k in _PROBE_KEYS}
    raw["pcie"] = g["pcie"] or {"unknown": dict.fromkeys(_PCIE_KEYS, unknown.get("pcie", NOT_IN_TEXT))}
    raw["unknown"] = unknown
    return raw


def _text_gpu(g: dict[str, Any], text: dict[str, Any]) -> dict[str, Any]:
    """The normalized GPU plus what only the text has (the screen's perf state and utilisation, -q's
    power limit, BAR1, module id ...) and its own reasons for what it lacks; the model also from a
    name nvidia-smi cut to its column."""
    for k, v in text.items():
        if k not in g and not k.endswith("_unknown"):
            g[k] = v
    if text.get("fans") is None:  # the probe's payload held NVML's code there, or nothing
        g["unknown"]["fans"] = text["unknown"].get("fans", NOT_IN_TEXT)
    _gpu_model(g)
    return g


def _gpus_section(p: Parsed, book: _GpuBook, count: int | None,
                  bench: tuple[str, list[tuple[int, str | None, str | None]]] | None) -> dict[str, Any]:
    """The text GPUs -> the nvml probe's payload -> the gpus normalizer; then the import's own
    fields (which file gave the count, merge notes, the screen's processes, a lower bound)."""
    listed = [book.by_index[i] for i in sorted(book.by_index)]
    levels, p2p = _gpu_matrices(p, listed)
    unknown: dict[str, Any] = {"nvml_version": "nvidia-smi text does not print it"}
    if any(cap not in p2p for cap in gpus_normalize.P2P_CAPS):
        unknown["p2p"] = "needs nvidia-smi topo -p2p for each capability"
    if levels is None:
        unknown["levels"] = "needs nvidia-smi topo -m"
    migs = [False if g["mig"] is None and g["unknown"].get("mig") == "NOT_SUPPORTED" else (g["mig"] or {}).get("current")
            for g in listed]
    for key, what, values in (("mig_enabled_any", "MIG mode", migs),
                              ("virtualized", "virtualization mode", [g["virtualization_mode"] for g in listed])):
        if not listed or any(v is None for v in values):
            unknown[key] = f"the {what} of some GPU is not in the imported text"
    if not p.query:
        unknown["driver_version"] = NOT_IN_TEXT + " (needs nvidia-smi -q)"
    known = max([book.at_least or 0, len(listed)])
    if count is None:
        unknown["count"] = (f"the imported text describes part of the host (at least {known} GPU(s)); "
                            "import nvidia-smi -q or -L for the count") if known else NOT_IN_TEXT
    payload = {"driver_version": p.query.driver_version if p.query else None, "nvml_version": None,
               "cuda_driver_version": p.query.cuda_version if p.query else None, "count": count,
               "gpus": [_probe_gpu(g) for g in listed], "levels": levels,
               "p2p": {k: v for k, v in p2p.items() if k in gpus_normalize.P2P_CAPS}, "unknown": unknown}
    section: dict[str, Any] = dict(gpus_normalize.normalize(payload))
    section["list"] = [_text_gpu(g, t) for g, t in zip(section["list"], listed)]
    # the modes topo -p2p printed, no others (pcie: `topo -p2p p`, which NVML's probe does not read)
    section["p2p"] = {k: section["p2p"][k] if k in gpus_normalize.P2P_CAPS else v for k, v in p2p.items()}
    section.update(count_sources=book.counts, notes=book.notes)
    if p.query and p.query.screen:
        section["processes"] = [pr.to_dict() for pr in p.query.processes]
    if count is None and known:
        section["count_at_least"] = known
    files = p.sources(p.query, p.smi_list, p.topo, *p.nvlink, *p.p2p, p.cpu if not p.topo else None,
                      *([p.bwlat] if bench and bench[0] == "p2pBandwidthLatencyTest" else []),
                      *(p.nvbandwidth if bench and bench[0] == "nvbandwidth" else []),
                      *(p.nccl if bench and bench[0] == "nccl-tests" else []))
    return _mark(section, files, _low_fields(p, section))


def _low_fields(p: Parsed, section: dict[str, Any]) -> list[str]:
    low = ["compute_capability", "lost"]
    if any(b is None for b in section["order"]):
        low.append("bus_id")
    if not p.query:
        low += ["serial", "vbios", "pcie", "ecc", "remapped_rows", "fabric", "temperature_c", "fans"]
    return low


def _gpu_matrices(p: Parsed, listed: list[dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    labels = [f"GPU{g['index']}" for g in listed]
    levels: Any = None
    if p.topo:
        levels = []
        for a in labels:
            row: list[str | None] = []
            for b in labels:
                try:
                    v = p.topo.level(a, b)
                except KeyError:
                    v = None
                # NV# hides the PCIe level NVML would report for the pair: unknown from text.
                row.append(None if v is None or v.startswith("NV") else v)
            levels.append(row)
    p2p: dict[str, Any] = {}
    for m in p.p2p:
        key = _P2P_MODES.get(m.mode or "")
        if key is None:
            continue
        idx = {lab: i for i, lab in enumerate(m.labels)}
        p2p[key] = [[m.matrix[idx[a]][idx[b]] if a in idx and b in idx else None for b in labels] for a in labels]
    return levels, p2p


# ---------------------------------------------------------------------------------------------
# facts["nvlink"]


def nvlink_facts(p: Parsed, gpus: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """nvlink -s / -c (and topo -m's NV#) -> what the nvlink probe would have sent -> its normalizer.
    Text cannot see remote ends: the payload says so (`remote_ends: false`), so pairs and switches
    stay unknown; NV# comes from topo -m as printed."""
    if not p.nvlink and not (p.topo and any(c and c.startswith("NV") for r in p.topo.matrix for c in r)):
        return None
    bus = {g["index"]: g["bus_id"] for g in (gpus or {}).get("list", [])}
    merged = _merge_nvlink_reports(p.nvlink, bus)
    raw = [_nvlink_gpu(merged[key]) for key in sorted(merged, key=lambda k: (k if isinstance(k, int) else 10**6))]
    if p.topo:
        raw += _topo_only_gpus(p.topo, raw, bus)
    section = dict(nvlink_normalize.normalize({"gpus": raw, "remote_ends": False}))
    section.pop("driver_version", None)  # nvlink -s does not print it (the gpus section has it from -q)
    nv = _topo_nv(p.topo, raw) if p.topo else None
    section["nv"] = nv
    if not section["supported"]:
        # no link listed: NVLink is known present only from topo -m's NV# or NVML's "all inActive"
        section["supported"] = True if (nv and any(x for r in nv for x in r)) or any(
            e["all_inactive"] for e in merged.values()) else None
    if not p.nvlink:
        section["gpus_unknown"] = "per-link state needs nvidia-smi nvlink -s; only topo -m NV# was imported"
    low = ["version", "remote_bus_id", "remote_type", "errors", "pairs", "nvswitches"]
    return _mark(section, p.sources(*p.nvlink, p.topo), low)


def _merge_nvlink_reports(reports: list[NvlinkReport], bus: dict[Any, Any]) -> dict[Any, dict[str, Any]]:
    """Each GPU's links across every nvlink -s / -c text, keyed by index (by UUID where the
    GPU's header was cropped): states and speeds from -s, capabilities from -c."""
    merged: dict[Any, dict[str, Any]] = {}
    for rep in reports:
        for ng in rep.gpus:
            key = ng.index if ng.index is not None else ("?", ng.uuid)
            e = merged.setdefault(key, {"index": ng.index, "bus_id": bus.get(ng.index), "uuid": ng.uuid,
                                        "name": ng.name, "links": {}, "all_inactive": False, "unknown": {}})
            e["uuid"] = e["uuid"] or ng.uuid
            e["name"] = e["name"] or ng.name
            e["all_inactive"] = e["all_inactive"] or ng.all_inactive
            e["partial"] = e.get("partial", False) or ng.partial
            for lk in ng.links:
                d = e["links"].setdefault(lk.link, {"link": lk.link, "state": None, "speed_gbps": None, "caps": {}})
                if lk.active is not None:
                    d["state"] = "up" if lk.active else "down"
                    d["speed_gbps"] = lk.speed_gbps
                d["caps"].update(lk.caps)
    return merged


def _nvlink_link(n: Any, d: dict[str, Any]) -> dict[str, Any]:
    """One merged link as the nvlink probe sends a link; what text cannot say is null with its reason."""
    unknown = {"version": "nvidia-smi nvlink -s does not print it",
               "remote_bus_id": "not in nvlink -s/-c text (needs nvlink -R)",
               "remote_type": "not in nvlink -s/-c text", "errors": "not in nvlink -s/-c text (needs -e)"}
    if d["state"] is None:
        unknown["state"] = "only capabilities (-c) were imported"
    caps = d["caps"]
    for c in CAP_KEYS.values():
        if c not in caps:
            unknown[c] = "capabilities not imported (nvlink -c)"
    # every capability nvlink -c prints (system memory atomics, SLI, link supported too)
    return {"link": n, "state": d["state"], "speed_gbps": d["speed_gbps"], **{c: caps.get(c) for c in CAP_KEYS.values()},
            "unknown": unknown}


def _nvlink_gpu(e: dict[str, Any]) -> dict[str, Any]:
    """One merged GPU as the nvlink probe sends it; where the text lists only part of its links the
    reason goes in `unknown`, which the normalizer reads to leave the counts null."""
    links = [_nvlink_link(n, e["links"][n]) for n in sorted(e["links"])]
    states = [lk["state"] for lk in links]
    unknown: dict[str, Any] = {"version": "nvidia-smi nvlink -s does not print it"}
    if e["bus_id"] is None:
        unknown["bus_id"] = NOT_IN_TEXT + " (needs nvidia-smi -q)"
    if e["all_inactive"] and not links:
        # NVML printed only "all links are inActive": none is up, but how many exist is not said.
        unknown["links_total"] = "nvidia-smi printed 'all links are inActive' without listing them"
    if e.get("partial") and links:
        # an excerpt of the GPU's links: how many it has is not in the text (never "links absent")
        unknown["links_total"] = f"partial listing ({len(links)} link lines; the paste elided or cut the rest)"
    if states and all(s is None for s in states):
        # -c lists links but not their state: nothing about up/down may be concluded.
        unknown["links_up"] = unknown["links_total"] = (
            f"only capabilities (-c) were imported ({len(links)} links listed, their state unknown)")
    return {"index": e["index"], "bus_id": e["bus_id"], "uuid": e["uuid"], "name": e["name"], "links": links,
            "unknown": unknown}


def _topo_only_gpus(topo: TopoMatrix, listed: list[dict[str, Any]], bus: dict[Any, Any]) -> list[dict[str, Any]]:
    """A record (links unknown) for every GPU of topo -m that nvlink -s did not list: `nv` is indexed
    like `order` and `gpus`, the shape the live probe writes."""
    have = {g["index"] for g in listed}
    out: list[dict[str, Any]] = []
    for d in topo.gpus:
        k = int_or_none(d.label[3:], INDEX)
        if k is not None and k < MAX_GPUS and k not in have:
            have.add(k)
            out.append({"index": k, "bus_id": bus.get(k), "uuid": None, "name": None, "links": [],
                        "unknown": {"links_total": "not in the imported nvlink -s text (topo -m NV# only)",
                                    "links_up": "not in the imported nvlink -s text",
                                    "version": "nvidia-smi nvlink -s does not print it"}})
    return out


def _topo_nv(topo: TopoMatrix, gpus: list[dict[str, Any]]) -> list[list[int | None]]:
    """topo -m's NV# per GPU pair, row i for gpus[i] (named by its `index`, as a live run's); a GPU
    whose `GPU n:` header was cropped from nvlink -s has no index and so no NV# row."""
    topo_labels = {d.label for d in topo.gpus}
    labels = [f"GPU{g['index']}" if isinstance(g["index"], int) else "GPU?" for g in gpus]
    return [[_nv(topo.level(a, b)) if a != b and a in topo_labels and b in topo_labels else None
             for b in labels] for a in labels]


def _nv(level: str | None) -> int | None:
    if level and re.fullmatch(r"NV\d+", level):
        return int_or_none(level[2:], INDEX)  # NV<20 digits>: no link count
    return None


# ---------------------------------------------------------------------------------------------
# facts["topology"]


def _cpu_only_topology(cpu: CpuAffinity) -> dict[str, Any]:
    """`topo -c N` alone: which GPUs are nearest to which CPU, no path matrix.  The GPUs it names
    exist (a lower bound of the host's GPUs); every pair's path level is unknown."""
    idx = sorted({i for v in cpu.nearest.values() for i in v})
    devices = [{"name": f"GPU{i}", "kind": "gpu", "bus_id": None, "cpu_affinity": None, "numa": None,
                "unknown": {"bus_id": "topo -c does not print bus ids", "cpu_affinity": "topo -c answers one CPU "
                            "at a time: the full affinity list is not known", "numa": "not in topo -c"}}
               for i in idx]
    n = len(devices)
    section: dict[str, Any] = {
        "devices": devices,
        "matrix": [["X" if a == b else None for b in range(n)] for a in range(n)],
        "matrix_unknown": "only nvidia-smi topo -c was imported: path levels need topo -m",
        "source": [["self" if a == b else None for b in range(n)] for a in range(n)],
        "legend_style": None,
        "nearest_gpus_by_cpu": {str(k): v for k, v in cpu.nearest.items()},
        "notes": [str(x) for x in cpu.notes],
    }
    return _mark(section, [cpu.source], ["bus_id", "matrix"])


def topology_facts(p: Parsed, gpus: dict[str, Any] | None = None) -> dict[str, Any] | None:
    if not p.topo:
        return _cpu_only_topology(p.cpu) if p.cpu is not None else None
    bus = {f"GPU{g['index']}": g["bus_id"] for g in (gpus or {}).get("list", [])}
    devices: list[dict[str, Any]] = []
    for d in p.topo.devices:
        if d.kind == "gpu":
            devices.append({"name": d.label, "kind": "gpu", "bus_id": bus.get(d.label), "cpu_affinity": d.cpu_affinity,
                            "numa": d.numa_affinity, "gpu_numa_id": d.gpu_numa_id, "unknown": dict(d.unknown)})
            if d.numa_nodes:
                devices[-1]["numa_nodes"] = d.numa_nodes  # several nodes (Grace: the CPU's and the HBM's)
        else:
            devices.append({"name": d.label, "kind": "nic", "bus_id": None, "label": d.name,
                            "unknown": dict(d.unknown, bus_id="topo -m does not print NIC bus ids")})
    for dev in devices:
        if dev["bus_id"] is None:
            dev["unknown"].setdefault("bus_id", "topo -m does not print bus ids (import nvidia-smi -q for GPUs)")
    n = len(devices)
    section = {
        "devices": devices,
        "matrix": [list(r) for r in p.topo.matrix],
        "source": [["self" if i == j else "text" for j in range(n)] for i in range(n)],
        "legend_style": p.topo.legend_style,
        "nearest_gpus_by_cpu": ({str(k): v for k, v in p.cpu.nearest.items()} if p.cpu else None),
        "notes": [str(x) for x in p.topo.notes],
    }
    return _mark(section, p.sources(p.topo, p.cpu), ["bus_id"])


# ---------------------------------------------------------------------------------------------
# facts["pcie"]

# lspci's printed names -> the codes sysfs gives the probe (pci.ids class names, PCIe capability port
# types, ACS flag words): the text says the same thing in words.
_CLASS_NAMES = {name.lower(): code for code, name in CLASS_NAMES.items()}
_PORT_CODE = {name.lower(): code for code, name in PORT_NAMES.items()}
_SYSFS_ONLY = "not in lspci text (sysfs only)"


def _class_code(v: PciDevice | None) -> str | None:
    """The class as sysfs would give it, without the prog-if lspci -nn leaves out: "0x0302"."""
    if v is None:
        return None
    if v.class_code:
        return f"0x{v.class_code}"
    name = (v.class_name or "").lower()
    if name == "bridge" and (v.vendor_id == "10de" or "NVIDIA" in (v.description or "")):
        return "0x0680"  # NVIDIA's "Bridge" functions are NVSwitches (class 0680)
    code = _CLASS_NAMES.get(name)
    return f"0x{code}" if code else None


def _vendor_by_name(v: PciDevice | None) -> str | None:
    """NVIDIA's vendor id where lspci printed its pci.ids name without -nn: a GPU is NVIDIA's by id."""
    return "10de" if v and (v.description or "").startswith("NVIDIA Corporation") else None


# lspci -tv prints no class, only the pci.ids name: the device kind is read from the name where the
# name says it (vendor and product line), else it stays unknown.  NVIDIA GPU names carry a chip
# code (GA102, GH100, GV100, AD102, TU104, GB202) or a product in brackets; NVSwitch names say so.
_NAME_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"NVIDIA.*NVSwitch", re.I), "nvswitch"),
    (re.compile(r"NVIDIA.*(Audio|USB|Serial bus|UCSI|Bridge|BlueField)", re.I), "other"),
    (re.compile(r"NVIDIA.*(\bG[A-Z]?\d{3}[A-Z]*\b|\bAD\d{3}\b|\bTU\d{3}\b|\[(Tesla|GeForce|Quadro|RTX|TITAN|"
                r"[AHBLVT]\d{1,3}\b|H100|H200|A100))", re.I), "gpu"),
    (re.compile(r"Mellanox|ConnectX|BlueField|Ethernet|InfiniBand|NetXtreme|BCM57\d{3}|\bE810\b|\bX710\b|"
                r"Network (Connection|Controller)", re.I), "nic"),
    (re.compile(r"Non-Volatile memory|NVMe|\bSSD\b", re.I), "nvme"),
    (re.compile(r"(Advanced Micro Devices|AMD/ATI).*(Instinct|Radeon|\bMI\d{3}|Navi|Vega|Aldebaran)", re.I), "other_gpu"),
    (re.compile(r"PEX\s?\d|PCIe (Gen ?\d )?Switch|PCI Express Switch|Switchtec", re.I), "bridge"),
)


def _kind_from_name(desc: str | None) -> str | None:
    if not desc:
        return None
    for rx, kind in _NAME_KINDS:
        if rx.search(desc):
            return kind
    # a named device of no kind fleetprobe tells apart (host bridges, USB, SATA, ...)
    return "other"


def _family(desc: str | None) -> str | None:
    """The maker read from the device name, where lspci printed no vendor id to read it from."""
    if not desc:
        return None
    for pat, fam in (("Mellanox|ConnectX", "ConnectX"), ("PEX|Broadcom / LSI", "Broadcom PEX"), ("PLX", "PLX"),
                     ("Microchip|Microsemi", "Microchip"), ("NVIDIA", "NVIDIA"), ("Broadcom", "Broadcom"),
                     ("Intel", "Intel")):
        if re.search(pat, desc):
            return fam
    return None


@dataclass
class _PciText:
    """One host's lspci text, indexed: -vvv devices by bus id, the tree's nodes, each device's parent."""

    vdev: dict[str, PciDevice]
    nodes: dict[str, TreeNode]
    parents: dict[str, str]
    bdfs: list[str]
    partial: bool  # `lspci -s` prompts or a grep: not every device of the host is listed


def _pci_text(p: Parsed) -> _PciText:
    vdev = {d.bdf: d for d in (p.verbose.devices if p.verbose else []) if d.bdf}
    nodes = p.tree.nodes if p.tree else {}
    # A listing is complete when it came from real device headers or a tree, not `lspci -s` prompts.
    partial = bool(p.verbose and any(d.class_name is None for d in p.verbose.devices)) and not p.tree
    bdfs = list(dict.fromkeys([*nodes.keys(), *vdev.keys()]))
    return _PciText(vdev, nodes, _parents(p, bdfs), bdfs, partial)


def _raw_config(v: PciDevice | None) -> dict[str, Any]:
    """The config-space part of the probe's record, from the capabilities lspci -vvv decoded."""
    cfg: dict[str, Any] = {"length": None}  # not read from config space: no judgement of root from its length
    if v is None:
        return cfg
    cap, sta = v.lnk_cap or LinkInfo(), v.lnk_sta or LinkInfo()
    code = _PORT_CODE.get((v.port_type or "").lower())
    if v.lnk_sta is not None or code is not None:
        cfg["pcie"] = {"port_type": code, "lnkcap_speed": cap.gen, "lnkcap_width": cap.width,
                       "lnksta_speed": sta.gen, "lnksta_width": sta.width}
    if v.acs_cap is not None:
        bits = dict(pcie_normalize.ACS_BITS)
        cfg["acs"] = {"cap": sum(bits.get(ACS_WORDS.get(k, k), 0) for k, on in v.acs_cap.items() if on),
                      "ctl": sum(bits.get(ACS_WORDS.get(k, k), 0) for k, on in (v.acs_ctl or {}).items() if on)}
    elif code is None:  # capabilities not printed: lspci without root, or a grep of some lines
        cfg["acs"] = {"unknown": "no ACSCap in the imported text (absent, or lspci run without root)"}
    else:
        cfg["acs"] = None  # capabilities printed (lspci as root) and no ACS among them: none
    return cfg


def _raw_device(b: str, pt: _PciText) -> dict[str, Any]:
    """One device as the pcie probe would have sent it; what lspci does not print is left None."""
    v, t = pt.vdev.get(b), pt.nodes.get(b)
    vid = (v.vendor_id if v else None) or (t.vendor_id if t else None) or _vendor_by_name(v)
    did = (v.device_id if v else None) or (t.device_id if t else None)
    chain = _chain(b, pt.parents)
    raw: dict[str, Any] = {
        "source": pcie_normalize.TEXT_SOURCE, "bdf": b, "path": ([f"pci{t.root}"] if t else []) + [*chain, b],
        "vendor": f"0x{vid}" if vid else None, "device": f"0x{did}" if did else None,
        "subsystem_vendor": None, "subsystem_device": None, "class": _class_code(v),
        "current_link_speed": None, "max_link_speed": None, "current_link_width": None, "max_link_width": None,
        "local_cpulist": None, "numa_node": None if v is None or v.numa_node is None else str(v.numa_node),
        "driver": v.driver if v else None, "iommu_group": v.iommu_group if v else None,
        "vf": None, "rdma": [], "netdevs": [], "config": _raw_config(v), "aer": None,
    }
    if raw["class"] is None:
        raw["name_kind"] = _name_kind(v, t)
    return raw


def _name_kind(v: PciDevice | None, t: TreeNode | None) -> str | None:
    """The kind of a device whose class code the text lacks: a class name of no kind told apart
    ("DMA controller") is "other"; a tree draws bridges as bridges and names the rest; an `lspci -s`
    excerpt without a header says nothing (None: unknown)."""
    if v is not None:
        return "other" if v.class_name else None
    if t is None:
        return None
    return "bridge" if t.is_bridge else _kind_from_name(t.description)


def pcie_facts(p: Parsed) -> dict[str, Any] | None:
    """lspci text -> the pcie probe's payload -> the pcie normalizer: one writer for facts["pcie"].
    What only the text has (partial listings, lspci's own downgrade marks, the driver it prints)
    and what it cannot have (sysfs names, /proc, the iommu) is added or marked unknown after."""
    if not (p.tree or p.verbose):
        return None
    pt = _pci_text(p)
    payload: dict[str, Any] = {"devices": [_raw_device(b, pt) for b in pt.bdfs], "nvidia": {}, "iommu": None}
    section: dict[str, Any] = dict(pcie_normalize.normalize(payload))
    order = {b: i for i, b in enumerate(pt.bdfs)}
    section["devices"] = sorted(section["devices"], key=lambda d: order[d["bdf"]])  # as lspci lists them
    for d in section["devices"]:
        _text_device(d, pt)
    section["devices"].extend({"bdf": None, "kind": None, "link": _lone_link(u), "unknown": {"bdf": "no device header"}}
                              for u in (p.verbose.devices if p.verbose else []) if not u.bdf)
    _text_lists(section, pt)
    section["downgraded"] = _downgraded(section, pt)
    section.update({
        "config_access": None, "config_access_unknown": "not known from text", "needs_root": None,
        "virtual_platform": {"detected": None, "evidence": [], "detected_unknown": "not judged from text"},
        "tree": section["tree"] if p.tree else None, "uplinks": None, "uplinks_unknown": "not computed from text",
        "gpu_counts": _gpu_counts(section["devices"], section["gpus"]),
        "levels": _levels_from_topo(p.topo) if p.topo else section["levels"]})
    for key in ("nvswitch_nodes", "iommu", "aer_links"):  # /dev, the iommu and AER counters: sysfs's only
        section.pop(key)
    if section["switches"] == [] and not any(d.get("port_type") for d in section["devices"]):
        section["switches"] = None  # no port types in the text: switches unknown, not none
    low = ["label", "rdma", "netdevs", "local_cpulist", "vf", "config_access", "uplinks", "virtual_platform"]
    return _mark(section, p.sources(p.tree, p.verbose, p.topo), low)


def _text_device(d: dict[str, Any], pt: _PciText) -> None:
    """What the normalizer cannot know a text lacked: named unknowns, the maker read from the name."""
    v, t = pt.vdev.get(d["bdf"]), pt.nodes.get(d["bdf"])
    unknown: dict[str, str] = {k: _SYSFS_ONLY for k in ("label", "rdma", "netdevs", "local_cpulist")}
    d["netdevs"] = None
    unknown["vf"] = "not in lspci text"
    if d["vendor"] is None:
        unknown["vendor"] = "needs lspci -nn"
    if d["class"] is None:
        unknown["class"] = "needs lspci -vvvnn (class code)"
    if d["kind"] is None:
        unknown["kind"] = "lspci -t without -v prints no device names" if t else "no class in the imported lines"
    if d["family"] is None:
        d["family"] = _family((v.description if v else None) or (t.description if t else None))
    if d["bdf"] not in pt.parents and not t:
        unknown["parent"] = "position in the tree unknown (no lspci -tv, no bridge bus ranges)"
    if d["link"] is None:
        unknown["link"] = "no LnkCap/LnkSta in the imported text"
    d["unknown"] = unknown


def _lone_link(v: PciDevice) -> dict[str, Any] | None:
    """The link lines of a device the text does not name (a grep without headers)."""
    if v.lnk_sta is None:
        return None
    gmax, wmax = (v.lnk_cap.gen, v.lnk_cap.width) if v.lnk_cap else (None, None)
    return {"gen_current": v.lnk_sta.gen, "gen_max": gmax, "speed_current": _speed(v.lnk_sta.gen),
            "speed_max": _speed(gmax), "width_current": v.lnk_sta.width, "width_max": wmax}


def _text_lists(section: dict[str, Any], pt: _PciText) -> None:
    """A partial listing, or a device of unknown kind, leaves the per-kind lists unknown."""
    if not (pt.partial or any(d["kind"] is None for d in section["devices"] if d["bdf"])):
        return
    for key in ("gpus", "nics", "nvswitches", "nvme"):
        section[key] = None
    section["gpus_unknown"] = ("partial lspci output (lspci -s or grep): the device list is incomplete"
                               if pt.partial else "device names unknown (lspci -t without -v; add lspci -tv or -vvvnn)")


def _downgraded(section: dict[str, Any], pt: _PciText) -> list[dict[str, Any]]:
    """The normalizer's downgraded links, plus those only lspci's own `(downgraded)` mark shows,
    each saying whose maximum it was judged against (the port's LnkCap may be missing)."""
    out = {e["bdf"]: dict(e) for e in section["downgraded"]}
    by = {d["bdf"]: d for d in section["devices"] if d["bdf"]}
    for b, v in pt.vdev.items():
        sta = v.lnk_sta
        if b not in out and sta and (sta.speed_downgraded or sta.width_downgraded) and by[b]["link"]:
            lk = by[b]["link"]
            out[b] = {"bdf": b, "kind": by[b]["kind"], **{k: lk[k] for k in (
                "gen_current", "gen_max", "speed_current", "speed_max", "width_current", "width_max")}}
    for b, e in out.items():
        parent = pt.vdev.get(pt.parents.get(b) or "")
        e["max_of"] = "link" if parent is not None and parent.lnk_cap is not None else "device"
        e["evidence"] = f"lspci {b}: LnkSta vs LnkCap" + (
            " of the device and its port" if e["max_of"] == "link" else " of the device (its port's is not in the text)")
    return [out[b] for b in sorted(out)]


def _gpu_counts(devices: list[dict[str, Any]], gpus: list[str] | None) -> dict[str, Any]:
    """What lspci text says about the driver: `Kernel driver in use` is printed whenever a driver
    is bound (no root needed), so in a complete listing its absence on every GPU means unbound."""
    out: dict[str, Any] = {"pci": None, "proc": None, "dev": None, "driver_loaded": None, "missing_from_proc": [],
                           "missing_from_dev": [], "proc_not_on_pci": [], "passthrough": [],
                           "unknown": "/proc/driver/nvidia and /dev are not in lspci text: proc, dev and the "
                                      "missing_* lists are not known"}
    if gpus is None:
        return out
    by = {d["bdf"]: d for d in devices if d.get("bdf")}
    drivers = {b: by[b].get("driver") for b in gpus}
    out["pci"] = len(gpus)
    out["passthrough"] = sorted(b for b, drv in drivers.items() if drv in ("vfio-pci", "pci-stub"))
    # A plain `lspci` (one line per device, as gpud's lspci.gb200) prints no detail of any device:
    # a driver it does not print is unknown, not unbound.
    detailed = any(d.get(k) is not None for d in devices for k in ("driver", "link", "numa", "iommu_group", "port_type"))
    if not detailed:
        out["unknown"] += "; a listing without detail lines (plain lspci) does not say which driver is bound"
        return out
    out["driver_loaded"] = any(drv == "nvidia" for drv in drivers.values()) if gpus else None
    return out


def _parents(p: Parsed, bdfs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    if p.tree:
        for b, n in p.tree.nodes.items():
            if n.parent:
                out[b] = n.parent
    if p.verbose:
        bridges = [d for d in p.verbose.devices if d.bdf and d.secondary is not None]
        for b in bdfs:
            if b in out:
                continue
            dom, bus = b[:4], int(b[5:7], 16)
            # The parent is the bridge whose secondary bus is this device's bus (same domain).
            cands = [x for x in bridges if x.bdf and x.bdf[:4] == dom and x.secondary == bus and x.bdf != b]
            if len(cands) == 1 and cands[0].bdf:
                out[b] = cands[0].bdf
    return out


def _chain(b: str, parents: dict[str, str]) -> list[str]:
    out: list[str] = []
    cur = parents.get(b)
    while cur and cur not in out:
        out.append(cur)
        cur = parents.get(cur)
    return list(reversed(out))


def _levels_from_topo(t: TopoMatrix) -> dict[str, Any]:
    return {"order": [None] * len(t.devices),
            "order_unknown": "topo -m does not print bus ids",
            "labels": [d.label for d in t.devices],
            "nic_names": [d.name or d.label for d in t.nics],
            "matrix": [[None if (c or "").startswith("NV") else c for c in r] for r in t.matrix],
            "matrix_note": "NV# cells hide the PCIe level: null"}


def kmsg_facts(p: Parsed) -> dict[str, Any] | None:
    """Kernel-log text -> facts["kmsg"]: the same events as the live probe; no boot id (text does
    not say which boot it shows), so nothing is matched with an earlier run."""
    if not p.kernel_log:
        return None
    lines = [ln for k in p.kernel_log for ln in k.lines]
    sec = dict(kmsg_normalize.normalize({"readable": True, "source": "text", "boot_id": None, "lines": lines,
                                          "lines_scanned": sum(k.scanned for k in p.kernel_log)}))
    return _mark(sec, p.sources(*p.kernel_log), ["boot_id", "boot_time", "uid"])


def nic_facts(p: Parsed) -> dict[str, Any] | None:
    """ibstat / ibstatus / ibv_devinfo text -> facts["nic"]; several reports of one HCA are merged
    (ibv_devinfo gives the board id, ibstat the rate), the later one filling what is still empty."""
    if not p.ib:
        return None
    devs: dict[str, dict[str, Any]] = {}
    for rep in p.ib:
        for d in rep.devices:
            have = devs.setdefault(d["name"], {**d, "ports": []})
            for k, v in d.items():
                if k != "ports" and have.get(k) is None:
                    have[k] = v
            ports = {pt["port"]: pt for pt in have["ports"]}
            for pt in d["ports"]:
                cur = ports.get(pt["port"])
                if cur is None:
                    have["ports"].append(dict(pt))
                else:
                    for k, v in pt.items():
                        if cur.get(k) in (None, {}) and v not in (None, {}):
                            cur[k] = v
    sec = dict(nic_normalize.normalize({"infiniband": list(devs.values()), "net": []}))
    sec["unknown"] = {"bus_id": NOT_IN_TEXT, "counters": NOT_IN_TEXT, "netdevs": NOT_IN_TEXT}
    return _mark(sec, p.sources(*p.ib), ["devices.bus_id", "devices.ports.counters", "netdevs"])


def to_facts(*parsed: Any) -> dict[str, dict[str, Any]]:
    """Any parsed results of one host -> facts sections {gpus, nvlink, topology, pcie} (absent ones left out)."""
    if len(parsed) == 1 and isinstance(parsed[0], Parsed):
        p = parsed[0]
    else:
        p = Parsed()
        for obj in parsed:
            p.add(obj)
    facts: dict[str, dict[str, Any]] = {}
    g = gpus_facts(p)
    if g is not None:
        facts["gpus"] = g
    for key, fn in (("nvlink", nvlink_facts), ("topology", topology_facts)):
        sec = fn(p, g)
        if sec is not None:
            facts[key] = sec
    pc = pcie_facts(p)
    if pc is not None:
        facts["pcie"] = pc
    for key, build in (("kmsg", kmsg_facts), ("nic", nic_facts)):
        section = build(p)
        if section is not None:
            facts[key] = section
    bench = p2p_facts(p)
    if bench is not None:
        facts["p2p"] = bench
    if p.nccl:
        facts["nccl"] = _mark(nccl_from_runs(p.nccl), p.sources(*p.nccl), [])
    fabric = fabric_from_text(p.perftest, p.nccl)
    if fabric is not None:
        facts["fabric"] = _mark(fabric, p.sources(*p.perftest, *[r for r in p.nccl if len(r.hosts) > 1]), [])
    return facts


def p2p_facts(p: Parsed) -> dict[str, Any] | None:
    """p2pBandwidthLatencyTest first (it prints bus ids and the peer-access matrix), else nvbandwidth."""
    if p.bwlat is not None:
        sec = p2p_from_bwlat(p.bwlat)
        files = [p.bwlat.source]
        if p.nvbandwidth:
            sec["notes"] = [f"nvbandwidth output kept out of facts.p2p: {', '.join(x.source for x in p.nvbandwidth)}"
                            " (p2pBandwidthLatencyTest was imported for the same host)"]
    elif any(r.testcases for r in p.nvbandwidth):
        # an nvbandwidth run that finished no testcase measured nothing: no p2p section (not "passed")
        sec = p2p_from_nvbandwidth(p.nvbandwidth)
        files = [x.source for x in p.nvbandwidth]
    else:
        return None
    return _mark(sec, sorted(files), ["verified", "rank", "nvml_nvlink", "all_to_host", "guard"])


def all_notes(p: Parsed) -> list[Note]:
    out: list[Note] = []
    for obj in (p.topo, *p.p2p, p.cpu, *p.nvlink, p.smi_list, p.query, p.tree, p.verbose, *p.kernel_log, *p.ib,
                p.bwlat, *p.nvbandwidth, *p.nccl, *p.perftest):
        if obj is not None:
            out.extend(Note(n.line, f"{obj.source}: {n.text}") for n in obj.notes)
    return out
