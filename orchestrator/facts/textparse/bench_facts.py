"""Parsed benchmark outputs -> what the p2p probe would have sent -> the p2p normalizer (facts["p2p"],
docs/facts-p2p.md), and facts["nccl"] (docs/facts-nccl.md), so the same checks judge an imported
benchmark as a live one and the live and imported sections of one machine agree.

What a benchmark does not print is null with a reason (`<field>_unknown`), never a default that
would read as measured: no data verification (verified null), no busy-GPU guard (guard.ran null),
bus ids only where the tool prints them.
"""

from __future__ import annotations

import statistics
from typing import Any

from orchestrator.facts import gpu_models
from orchestrator.facts.normalize import nccl as nccl_normalize
from orchestrator.facts.normalize import p2p as p2p_normalize
from orchestrator.facts.textparse.bench import (
    BenchDevice,
    BwLatency,
    NcclRun,
    NvBandwidth,
    nvbandwidth_median,
)

_NOT_PRINTED = "not printed by {tool}"


def _gpu(dev: BenchDevice, tool: str, host: dict[str, list[list[Any]]]) -> dict[str, Any]:
    """One GPU as the probe sends it: what the tool printed, the rest null with the reason."""
    i = dev.index
    g: dict[str, Any] = {"index": i, "bus_id": dev.bus_id, "name": dev.name, "status": "ok", "error": None,
                         "unknown": {"verified": f"{tool} does not verify the copied data",
                                     "busy_processes": f"{tool} does not check for other processes"}}
    g["unknown"]["local_sm_gbps"] = f"{tool} does not print an SM copy within the GPU"
    g["load_unknown"] = f"{tool} does not read the GPU's clocks and power under load"
    for key in ("h2d_gbps", "d2h_gbps"):
        g[key] = _cell(host.get(key), 0, i)
        if g[key] is None:
            g["unknown"][key] = f"not in the imported {tool} output"
    if dev.bus_id is None:
        g["unknown"]["bus_id"] = _NOT_PRINTED.format(tool=tool)
    if dev.name is None:
        g["unknown"]["name"] = g["unknown"]["model"] = _NOT_PRINTED.format(tool=tool)
    elif gpu_models.lookup(dev.name) is None:
        g["unknown"]["model"] = "not in the model table"
    return g


def _cell(m: list[list[float | None]] | None, a: int, b: int) -> float | None:
    try:
        return m[a][b] if m is not None else None
    except IndexError:
        return None


def _pair(tool: str, a: int, b: int, mats: dict[str, list[list[Any]]],
          access: dict[tuple[int, int], bool] | None) -> dict[str, Any] | None:
    """One ordered GPU pair as the probe sends it; None where the tool printed nothing for it."""
    can = access.get((a, b)) if access is not None else None
    cells = {k: _cell(mats.get(k), a, b) for k in ("ce_gbps", "sm_read_gbps", "latency_us")}
    if can is None and _cell(mats.get("bidir_gbps"), a, b) is None and all(v is None for v in cells.values()):
        return None
    p: dict[str, Any] = {"src": a, "dst": b, "can_access_peer": can, "peer_error": None, **cells,
                         "unknown": {"verified": f"{tool} does not verify the copied data"}}
    # a figure means peer access worked (nvbandwidth measures only pairs with it); whether an
    # unmeasured pair is staged the tool does not say without its peer-access matrix
    p["peer_enabled"] = can if can is not None else cells["ce_gbps"] is not None
    if can is None:
        p["unknown"]["can_access_peer"] = f"{tool} does not print the peer-access matrix"
    return p


_TOOL_UNKNOWN = {"rank": "{tool} does not print the P2P performance rank",
                 "nvml_nvlink": "{tool} does not print NVML's NVLink P2P status",
                 "all_to_host": "not in the imported {tool} output",
                 "dmabuf": "{tool} does not print the GPUs' DMA-BUF support"}


def _section(tool: str, devices: list[BenchDevice], matrices: dict[str, list[list[Any]]],
             access: dict[tuple[int, int], bool] | None, runs: dict[str, int], version: str | None) -> dict[str, Any]:
    """The tool's figures as the p2p probe would have sent them, through the p2p normalizer:
    a device-local copy on the diagonal, a pair a cell off it, both directions of the bidirectional
    test; the tool's tables without a probe counterpart kept as printed."""
    n = len(devices)
    gpus = [_gpu(d, tool, matrices) for d in devices]
    for g in gpus:
        g["local_ce_gbps"] = _cell(matrices.get("ce_gbps"), g["index"], g["index"])
    pairs = [p for a in range(n) for b in range(n) if a != b
             and (p := _pair(tool, a, b, matrices, access)) is not None]
    bidir = [{"a": a, "b": b, "total_gbps": v, "directed": True} for a in range(n) for b in range(n)
             if a != b and (v := _cell(matrices.get("bidir_gbps"), a, b)) is not None]
    payload = {
        "gpus": gpus, "pairs": pairs, "bidirectional": bidir, "cuda_driver": version,
        "can_access_peer": [[None if a == b else access.get((a, b)) for b in range(n)] for a in range(n)]
        if access is not None else [],
        "tool_matrices": {k: v for k, v in matrices.items() if k not in ("h2d_gbps", "d2h_gbps")},
        "guard": {"ran": None, "ran_unknown": f"{tool} has no busy-GPU guard"}, "complete": True,
        "unknown": {k: v.format(tool=tool) for k, v in _TOOL_UNKNOWN.items()},
    }
    sec = dict(p2p_normalize.normalize(payload))
    sec["params"] = {"tool": tool, "runs": runs}
    sec["source"] = tool
    return sec


def p2p_from_bwlat(b: BwLatency) -> dict[str, Any]:
    m = {k: v for k, v in b.matrices.items() if k != "connectivity"}
    return _section("p2pBandwidthLatencyTest", b.devices, m, b.can_access or None, {k: 1 for k in m}, None)


# nvbandwidth testcase -> (the probe's matrix key, transpose: the description reads `row <- column`)
_NVB_PAIR = {
    "device_to_device_memcpy_write_ce": "ce_gbps",
    "device_to_device_memcpy_read_ce": "ce_gbps",
    "device_to_device_memcpy_read_sm": "sm_read_gbps",
    "device_to_device_latency_sm": "latency_us",
}
_NVB_HOST = {"host_to_device_memcpy_ce": "h2d_gbps", "device_to_host_memcpy_ce": "d2h_gbps",
             "host_to_device_memcpy_sm": "h2d_gbps", "device_to_host_memcpy_sm": "d2h_gbps"}


def p2p_from_nvbandwidth(reports: list[NvBandwidth]) -> dict[str, Any]:
    """Every testcase is kept under `matrices["nvbandwidth.<testcase>"]` (median over repeated
    runs); the ones with a probe counterpart also fill it (ce_gbps, latency_us, h2d/d2h)."""
    runs: dict[str, list[tuple[str, list[list[float | None]]]]] = {}
    devices: dict[int, BenchDevice] = {}
    for r in reports:
        for name, rs in r.testcases.items():
            runs.setdefault(name, []).extend(rs)
        devices.update(r.devices)
    matrices: dict[str, list[list[Any]]] = {}
    n = 0
    for name in sorted(runs):
        desc, mat = nvbandwidth_median(runs[name])
        matrices[f"nvbandwidth.{name}"] = mat
        width = max((len(row) for row in mat), default=0)
        n = max(n, width)
        if name in _NVB_PAIR:
            key = _NVB_PAIR[name]
            if key == "ce_gbps" and name.endswith("read_ce") and "device_to_device_memcpy_write_ce" in runs:
                continue  # write CE is the probe's copy (the source pushes); read CE stays under its own name
            m = mat
            if "<-" in desc and "<->" not in desc:
                m = [list(col) for col in zip(*mat)]  # row <- column: the column is the source
            if key == "latency_us":
                m = [[None if v is None else round(v / 1000.0, 3) for v in row] for row in m]
            matrices[key] = m
        elif name in _NVB_HOST and _NVB_HOST[name] not in matrices:
            matrices[_NVB_HOST[name]] = mat
    n = max([n, *(i + 1 for i in devices)])
    devs = [devices.get(i) or BenchDevice(i, None, None) for i in range(n)]
    version = next((r.driver_version for r in reports if r.driver_version), None)
    out = _section("nvbandwidth", devs, matrices, None, {k: len(v) for k, v in runs.items()}, version)
    out["params"]["version"] = next((r.version for r in reports if r.version), None)
    return out


def _nccl_gpus(first: NcclRun, hosts: list[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs of the one host a complete one-host run lists; else none, and why."""
    if first.ranks_at_least is not None:
        return [], (f"the output lists some ranks only (the highest {first.ranks_at_least - 1}): at "
                    f"least {first.ranks_at_least} ranks; this host's GPUs are unknown")
    if first.ranks is not None and len(hosts) <= 1:
        by_rank = {d["rank"]: d for d in first.devices}
        return [{"bus_id": by_rank[r].get("bus_id") if r in by_rank else None,
                 "name": by_rank[r].get("name") if r in by_rank else None} for r in range(first.ranks)], None
    if first.ranks is not None:
        per = [sum(1 for d in first.devices if d["host"] == h) for h in hosts]
        return [], (f"{first.ranks} ranks on {len(hosts)} hosts ({', '.join(map(str, per))} per host): "
                    "a multi-node run, not one host's GPUs")
    return [], "no 'Using devices' list in the imported output"


def _stated_average(runs: list[NcclRun], sec: dict[str, Any]) -> None:
    """nccl-tests' own 'Avg bus bandwidth' line, as printed (the mean where several runs print one)."""
    avgs = [r.avg_busbw_gbps for r in runs if r.avg_busbw_gbps is not None]
    sec.pop("avg_busbw_gbps_unknown", None)
    if len(avgs) == 1:
        sec["avg_busbw_gbps"] = avgs[0]
    elif avgs:
        sec["avg_busbw_gbps"] = round(statistics.mean(avgs), 3)
        sec["avg_busbw_note"] = f"mean of {len(avgs)} runs' 'Avg bus bandwidth'"
    else:
        sec["avg_busbw_gbps"] = None
        sec["avg_busbw_gbps_unknown"] = "no 'Avg bus bandwidth' line in the imported output"


def nccl_from_runs(runs: list[NcclRun]) -> dict[str, Any]:
    """nccl-tests outputs -> what the nccl probe would have sent -> the nccl normalizer (NcclFacts):
    every result row of every file, op named per row; NCCL's INFO lines read by the probe's log
    reader.  What nccl-tests does not print is null with the reason, never the probe's default."""
    first = runs[0]
    hosts = list(dict.fromkeys(h for r in runs for h in r.hosts))
    gpus, gpus_unknown = _nccl_gpus(first, hosts)
    version = next((r.version for r in runs if r.version), None)
    lines = [x for r in runs for x in r.info_lines]
    unknown = {"version": "no 'NCCL version' line in the imported output",
               "env_overrides": "nccl-tests does not print the host's NCCL settings",
               "env_kept": "nccl-tests does not print the host's NCCL settings",
               "library": "nccl-tests does not print which libnccl it loaded"}
    if gpus_unknown:
        unknown["gpu_count"] = gpus_unknown
    if any(r.op is None for r in runs):
        unknown["op"] = "the output names no binary and its columns print all_gather and alltoall alike"
    if not lines and len(gpus) != 1:  # one GPU: the normalizer says no data moved
        unknown["transport"] = unknown["channels"] = \
            "no NCCL INFO 'via ...' lines (run with NCCL_DEBUG=INFO to see the transport)"
    payload = {"library": {"version": version}, "gpus": gpus, "selected": list(range(len(gpus))),
               "ranks": first.ranks or first.ranks_at_least,
               "results": [{"op": r.op, **row} for r in runs for row in r.results], "debug_lines": lines,
               # nccl-tests prints its closing lines (average, out-of-bounds count) once the sweep ended
               "complete": all(r.avg_busbw_gbps is not None or r.out_of_bounds is not None for r in runs),
               "source": "nccl-tests", "unknown": unknown}
    sec = dict(nccl_normalize.normalize(payload))
    _stated_average(runs, sec)
    sec["ranks"], sec["hosts"] = first.ranks, hosts
    if first.ranks_at_least is not None:
        sec["ranks_at_least"] = first.ranks_at_least
    oob = [r.out_of_bounds for r in runs if r.out_of_bounds is not None]
    sec["out_of_bounds"] = sum(oob) if oob else None
    if not oob:
        sec["out_of_bounds_unknown"] = "no 'Out of bounds values' line in the imported output"
    return sec
