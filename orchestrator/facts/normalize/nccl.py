"""Normalize the nccl probe's data into `facts["nccl"]` (pure; shape in docs/facts-nccl.md).

The probe returns NCCL's own INFO log lines (transport and channel lines); `parse_debug_log` reads
them here, on the controller, so a stored run is re-read with today's parser, and the nccl-tests
importer (facts/textparse) reads the same lines out of an nccl-tests log into the same fields.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from orchestrator.facts.model import NcclFacts, NcclResult
from orchestrator.facts.normalize.gpus import model_key
from orchestrator.facts.textsafe import is_digits, reasons

# The settings that only decide where NCCL logs (the probe sets them itself) change no result.
LOGGING_SETTINGS = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS", "NCCL_CONF_FILE"})
# Settings of the network between nodes only (interfaces, InfiniBand HCAs and their tuning): sites
# set them on purpose for multi-node jobs, and they change nothing in one host's all_reduce.
NETWORK_ONLY_PREFIXES = ("NCCL_SOCKET_", "NCCL_IB_")
TRANSPORTS = ("NVLS", "P2P", "SHM", "NET")

# "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "... [send] via NET/IB/0/GDRDMA", "via SHM/direct/direct"
_VIA = re.compile(r"\bvia (P2P|SHM|NET|CollNet)\b")
# "16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, ..." (2.12+),
# "2 coll channels, 2 p2p channels, 1 p2p channels per peer" (older)
_COLL = re.compile(r"\b(\d+) coll channels,(?: (\d+) collnet channels,)?(?: (\d+) nvls channels,)?")
# "Channel 00/24 :    0   1   2   3" (rings listed with the total, older NCCL)
_RING = re.compile(r"\bChannel \d+/(\d+) :\s+\d+\s+\d+")
_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?$")


def parse_debug_log(lines: list[str]) -> dict[str, Any]:
    """transport (the one most channel connections use, NVLS when NVLS channels exist), every
    transport seen, coll channels, nvls channels, NCCL's version and the settings it reports."""
    via: Counter[str] = Counter()
    channels: int | None = None
    nvls = 0
    version = None
    env: dict[str, str] = {}
    # Each pattern is searched only in a line holding its literal text (a match implies it): a
    # substring test costs a fraction of a regex search, and most lines match one pattern or none.
    for line in lines:
        if not isinstance(line, str):
            continue
        m = _VIA.search(line) if "via " in line else None
        if m:
            via["NET" if m.group(1) == "CollNet" else m.group(1)] += 1
            continue
        m = _COLL.search(line) if " coll channels," in line else None
        if m:
            channels = max(channels or 0, int(m.group(1)))
            if m.group(3):
                nvls = max(nvls, int(m.group(3)))
            continue
        m = _RING.search(line) if "Channel " in line else None
        if m:
            channels = max(channels or 0, int(m.group(1)))
            continue
        if "Connected NVLS" in line:
            nvls = max(nvls, 1)
        m = _VERSION.search(line) if "NCCL version " in line else None
        if m and version is None:
            version = m.group(1)
        m = _ENV.search(line) if " set by environment to " in line else None
        if m:
            env[m.group(1)] = m.group(2)
    seen = [t for t in TRANSPORTS if t in via or (t == "NVLS" and nvls)]
    if nvls:
        transport: str | None = "NVLS"
    elif via:
        transport = max(via.items(), key=lambda kv: (kv[1], -TRANSPORTS.index(kv[0])))[0]
    else:
        transport = None
    return {"transport": transport, "transports": seen, "channels": channels, "nvls_channels": nvls or None,
            "version": version, "env": env}


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _i(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _result(r: dict[str, Any], op_unknown: bool = False) -> NcclResult | None:
    """A result row; a row without an op is kept only where the source said why it cannot name one
    (nccl-tests' all_gather and alltoall tables look alike), never from the probe's own results."""
    size = _i(r.get("size_bytes"))
    op = r.get("op")
    if size is None or not (isinstance(op, str) or (op is None and op_unknown)):
        return None
    return {"op": op, "size_bytes": size, "count": _i(r.get("count")),
            "dtype": r.get("dtype") if isinstance(r.get("dtype"), str) else None,
            "redop": r.get("redop") if isinstance(r.get("redop"), str) else None,
            "time_us": _f(r.get("time_us")), "algbw_gbps": _f(r.get("algbw_gbps")),
            "busbw_gbps": _f(r.get("busbw_gbps")), "in_place": bool(r.get("in_place")), "wrong": _i(r.get("wrong"))}


def env_overrides(inherited: Any, files: Any) -> dict[str, str]:
    """The NCCL settings a process on the host gets: the environment wins over the conf files (as
    NCCL's loader never overwrites a set variable); the logging ones change no result."""
    out: dict[str, str] = {}
    for conf in (files or {}).values() if isinstance(files, dict) else ():
        if isinstance(conf, dict):
            for k, v in conf.items():
                out.setdefault(str(k), str(v))
    for k, v in (inherited or {}).items() if isinstance(inherited, dict) else ():
        out[str(k)] = str(v)
    return {k: out[k] for k in sorted(out) if k not in LOGGING_SETTINGS}


def average_busbw(results: list[NcclResult]) -> float | None:
    """nccl-tests' "Avg bus bandwidth": the mean bus bandwidth over the sizes measured."""
    vals = [r["busbw_gbps"] for r in results if r["busbw_gbps"] is not None]
    return round(sum(vals) / len(vals), 3) if vals else None


def largest_allreduce(results: list[NcclResult]) -> float | None:
    """The bus bandwidth of the largest out-of-place all_reduce (the figure floors hold for)."""
    rows = [(r["size_bytes"], r["busbw_gbps"]) for r in results
            if r["op"] == "all_reduce" and not r["in_place"] and r["busbw_gbps"] is not None]
    return max(rows)[1] if rows else None


def _busy(data: dict[str, Any], gpus: list[dict[str, Any]], selected: list[int]) -> list[str]:
    """Bus ids of the GPUs the busy guard left out (other compute processes, not forced)."""
    raw_guard = data.get("guard")
    guard: dict[str, Any] = raw_guard if isinstance(raw_guard, dict) else {}
    raw_busy = guard.get("busy")
    busy: dict[str, Any] = raw_busy if isinstance(raw_busy, dict) else {}
    out = []
    for key in busy:
        i = int(key) if isinstance(key, str) and is_digits(key) else None
        if i is not None and 0 <= i < len(gpus) and i not in selected:
            out.append(str(gpus[i].get("bus_id") or "").lower())
    return out


def normalize(data: dict[str, Any]) -> NcclFacts:
    if not isinstance(data, dict):
        raise ValueError("nccl data must be a mapping")
    raw_lib = data.get("library")
    lib: dict[str, Any] = raw_lib if isinstance(raw_lib, dict) else {}
    gpus = [g for g in data.get("gpus") or [] if isinstance(g, dict)]
    selected = [i for i in data.get("selected") or [] if isinstance(i, int) and 0 <= i < len(gpus)]
    op_unknown = "op" in reasons(data.get("unknown"))
    results = [x for x in (_result(r, op_unknown) for r in data.get("results") or [] if isinstance(r, dict))
               if x is not None]
    lines = data.get("debug_lines")
    log = parse_debug_log(lines if isinstance(lines, list) else [])
    raw_env = data.get("env")
    env: dict[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    # data moved between GPUs: more than one GPU measured, or (a text import that does not know this
    # host's GPUs) more than one rank in the run
    moved = len(selected) > 1 or (not selected and (_i(data.get("ranks")) or 0) > 1)
    out: NcclFacts = {
        "version": lib.get("version") if isinstance(lib.get("version"), str) else log["version"],
        "gpu_count": len(selected) or None,
        "results": results,
        "avg_busbw_gbps": average_busbw(results),
        "transport": log["transport"] if moved else None,
        "channels": log["channels"] if moved else None,
        "env_overrides": env_overrides(env.get("inherited"), env.get("files")),
        "source": data["source"] if isinstance(data.get("source"), str) else "probe",
        "gpus": [str(gpus[i].get("bus_id") or "").lower() for i in selected],
        "gpu_model": model_key(gpus[selected[0]].get("name")) if selected else None,
        "transports": log["transports"] if moved else [],
        "env_kept": bool(env.get("kept")),
        "library": lib.get("path") if isinstance(lib.get("path"), str) else None,
        "errors": [e for e in data.get("errors") or [] if isinstance(e, dict)],
        "hang": data.get("hang") if isinstance(data.get("hang"), dict) else None,
        "limitation": data.get("limitation") if isinstance(data.get("limitation"), str) else None,
        "complete": bool(data.get("complete")),
        "stdout_bytes": _i(data.get("stdout_bytes")) or 0,
        "virtualization_mode": _i((data.get("platform") or {}).get("virtualization_mode"))
        if isinstance(data.get("platform"), dict) else None,
        "busy_gpus": _busy(data, gpus, selected),
    }
    _unknowns(out, lines, reasons(data.get("unknown")))
    return out


def _unknowns(out: NcclFacts, lines: Any, told: dict[str, str]) -> None:
    """`<field>_unknown` for each field left null: the source's own reason where it gave one.  A
    source that cannot see the host's settings or library says so, and those stay null too."""
    why: dict[str, str] = {}
    if out["version"] is None:
        why["version"] = "the probe found no usable NCCL library"
    if out["gpu_count"] is None:
        why["gpu_count"] = out["limitation"] or "no GPU was measured"
    if out["avg_busbw_gbps"] is None:
        why["avg_busbw_gbps"] = "no message size was measured"
    if len(out["gpus"]) == 1:
        why["transport"] = why["channels"] = "one GPU: NCCL moves no data between GPUs"
    else:
        if out["transport"] is None:
            why["transport"] = "NCCL's log named no transport" if lines else "NCCL's log was not read"
        if out["channels"] is None:
            why["channels"] = "NCCL's log named no channel count" if lines else "NCCL's log was not read"
    for key in ("env_overrides", "env_kept", "library"):
        if key in told:
            out[key] = None
            why[key] = told[key]
    for key in why:
        out[key + "_unknown"] = told.get(key, why[key])  # type: ignore[literal-required]
