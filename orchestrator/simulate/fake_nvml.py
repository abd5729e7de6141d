"""Build a fake `libnvidia-ml.so.1` for one fixture machine: YAML -> generated C data -> gcc.

`build_fake_nvml("dgx-h100", dest)` reads `machines/dgx-h100.nvml.yaml` (a fault variant names
its `base:` and overrides), expands it into per-GPU / per-link / per-pair tables
(`expand_machine`, pure), writes them as `fake_nvml_data.h` beside a copy of `fake_nvml.c`
and compiles a shared object.  Builds are cached by a hash of everything that goes into them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from orchestrator.simulate.cbuild import BuildError, build_shared_library

HERE = Path(__file__).resolve().parent
MACHINES = HERE / "machines"
C_SOURCE = HERE / "fake_nvml.c"

NVML_ERRORS = {"SUCCESS": 0, "INVALID_ARGUMENT": 2, "NOT_SUPPORTED": 3, "NO_PERMISSION": 4,
               "NOT_FOUND": 6, "DRIVER_NOT_LOADED": 9, "GPU_IS_LOST": 15, "RESET_REQUIRED": 16,
               "LIB_RM_VERSION_MISMATCH": 18,
               "NO_DATA": 21, "UNKNOWN": 999}
LEVELS = {"INTERNAL": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
P2P = {"OK": 0, "CNS": 1, "GNS": 2, "TNS": 3, "DR": 4, "NS": 5, "U": 6}
FABRIC_STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}
NVLINK_TYPES = {"gpu": 0, "ibmnpu": 1, "nvswitch": 2, "unknown": 0xFF}


class FixtureError(ValueError):
    pass


def machine_names() -> list[str]:
    return sorted(p.name[: -len(".nvml.yaml")] for p in MACHINES.glob("*.nvml.yaml"))


def _deep_merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _deep_merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def load_machine(name: str) -> dict[str, Any]:
    """The fixture with its `base:` chain resolved (fault variants override a healthy machine).

    A variant `<base>--<fault>` without an NVML file of its own (its fault lives in another layer,
    e.g. PCIe or CUDA) is its base machine as NVML sees it, under its own name (own identities).
    """
    path = MACHINES / f"{name}.nvml.yaml"
    if not path.is_file():
        base = name.split("--", 1)[0]
        if base != name and (MACHINES / f"{base}.nvml.yaml").is_file():
            spec = load_machine(base)
            spec["machine"] = name
            return spec
        raise FixtureError(f"no NVML fixture {name!r}; known: {', '.join(machine_names())}")
    raw = yaml.safe_load(path.read_text()) or {}
    base_name = raw.pop("base", None)
    spec = _deep_merge(load_machine(base_name), raw) if base_name else raw
    spec["machine"] = name
    return spec


def _hex_id(*parts: str, n: int = 16) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[: n * 2]


def _uuid(prefix: str, *parts: str) -> str:
    h = _hex_id(*parts)
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _cpumask(cpulist: str) -> list[int]:
    words = [0, 0, 0, 0]
    for part in cpulist.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            words[cpu // 64] |= 1 << (cpu % 64)
    return words


def _links(spec: dict[str, Any], gpus: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Per GPU, per link index: active flag, remote bus id, remote type."""
    bus = [g["bus_id"] for g in gpus]
    out: list[list[dict[str, Any]]] = [[] for _ in gpus]
    switches = spec.get("nvswitches") or []
    if switches:
        per_switch = spec["nvlink_switch_links"]
        for i in range(len(gpus)):
            for s, n in enumerate(per_switch):
                out[i] += [{"remote": switches[s], "type": "nvswitch"} for _ in range(n)]
    for a, b, n in spec.get("nvlink_pairs") or []:
        # pairs refer to GPU positions in the fixture's full list; skip GPUs a fault removed
        ba, bb = spec["_all_bus"][a], spec["_all_bus"][b]
        for x, y in ((ba, bb), (bb, ba)):
            if x in bus:
                out[bus.index(x)] += [{"remote": y, "type": "gpu"} for _ in range(n)]
    for i, g in enumerate(gpus):
        down = set(g.get("links_down") or [])
        for k, link in enumerate(out[i]):
            link["active"] = 0 if k in down else 1
            link["err"] = [g.get("nvlink_replay", 0), 0, 0, 0]
    return out


def _nvlinked(links: list[list[dict[str, Any]]], i: int, j: int, bus: list[str]) -> bool:
    """Two GPUs talk over NVLink: a direct active link, or both have active links into the fabric."""
    direct = any(lk["active"] and lk["remote"] == bus[j] for lk in links[i])
    fabric = (any(lk["active"] and lk["type"] == "nvswitch" for lk in links[i])
              and any(lk["active"] and lk["type"] == "nvswitch" for lk in links[j]))
    return direct or fabric


def _level(spec: dict[str, Any], gpus: list[dict[str, Any]], i: int, j: int) -> int:
    topo = spec.get("topology") or {}
    a, b = spec["_all_bus"].index(gpus[i]["bus_id"]), spec["_all_bus"].index(gpus[j]["bus_id"])
    for group in topo.get("switch_groups") or []:
        if a in group and b in group:
            return LEVELS[topo.get("switch_level", "PIX")]
    if gpus[i].get("numa", 0) == gpus[j].get("numa", 0):
        return LEVELS[topo.get("same_numa", "NODE")]
    return LEVELS[topo.get("cross_numa", "SYS")]


# nvmlClocksEventReason* bits (nvml.h); a fixture names them.
CLOCK_REASONS = {"gpu_idle": 0x1, "applications_clocks": 0x2, "sw_power_cap": 0x4, "hw_slowdown": 0x8,
                 "sync_boost": 0x10, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
                 "display_clocks": 0x100}


def _clock_bits(names: Any) -> int:
    if isinstance(names, int):
        return names
    unknown = [n for n in names or [] if n not in CLOCK_REASONS]
    if unknown:
        raise FixtureError(f"unknown clock reasons {unknown}; known: {', '.join(CLOCK_REASONS)}")
    return sum(CLOCK_REASONS[n] for n in names or [])


# nvmlPerfPolicyType_t (nvml.h): the index of each violation-time counter.
PERF_POLICIES = {"power": 0, "thermal": 1, "sync_boost": 2, "board_limit": 3, "low_utilization": 4,
                 "reliability": 5, "total_app_clocks": 10, "total_base_clocks": 11}
# nvmlDeviceGpuRecoveryAction_t (nvml.h, R570+).
RECOVERY_ACTIONS = {"NONE": 0, "GPU_RESET": 1, "NODE_REBOOT": 2, "DRAIN_P2P": 3, "DRAIN_AND_RESET": 4}
# NVML_GPU_FABRIC_HEALTH_MASK_* (nvml.h): (shift, {state: value}) of each field of the health mask.
FABRIC_HEALTH_FIELDS = {
    "degraded_bw": (0, {"not_supported": 0, "true": 1, "false": 2}),
    "route_recovery": (2, {"not_supported": 0, "true": 1, "false": 2}),
    "route_unhealthy": (4, {"not_supported": 0, "true": 1, "false": 2}),
    "access_timeout_recovery": (6, {"not_supported": 0, "true": 1, "false": 2}),
    "incorrect_configuration": (8, {"not_supported": 0, "none": 1, "incorrect_sysguid": 2,
                                    "incorrect_chassis_sn": 3, "no_partition": 4, "insufficient_nvlinks": 5}),
}


def _violations(spec: Any) -> list[int]:
    out = [0] * 12
    for name, ns in (spec or {}).items():
        if name not in PERF_POLICIES:
            raise FixtureError(f"unknown violation policy {name!r}; known: {', '.join(PERF_POLICIES)}")
        out[PERF_POLICIES[name]] = int(ns)
    return out


def _health_mask(spec: Any) -> int:
    """{degraded_bw: "true", incorrect_configuration: "none", ...} (or the raw int) -> the mask."""
    if isinstance(spec, int):
        return spec
    mask = 0
    for name, state in (spec or {}).items():
        if name not in FABRIC_HEALTH_FIELDS or str(state).lower() not in FABRIC_HEALTH_FIELDS[name][1]:
            raise FixtureError(f"unknown fabric health field {name}={state!r}")
        shift, values = FABRIC_HEALTH_FIELDS[name]
        mask |= values[str(state).lower()] << shift
    return mask


def _mem_errors(spec: dict[str, Any]) -> list[list[list[int]]]:
    """{dram|sram: {volatile_corrected, aggregate_corrected, volatile_uncorrected, aggregate_uncorrected}}
    -> [location][corrected, uncorrected][volatile, aggregate]."""
    out = [[[0, 0], [0, 0]], [[0, 0], [0, 0]]]
    for li, loc in enumerate(("dram", "sram")):
        for ei, err in enumerate(("corrected", "uncorrected")):
            for ci, cnt in enumerate(("volatile", "aggregate")):
                out[li][ei][ci] = int((spec.get(loc) or {}).get(f"{cnt}_{err}", 0))
    return out


def _ecc_totals(mem_err: list[list[list[int]]]) -> dict[str, str]:
    """nvmlDeviceGetTotalEccErrors counts every memory location: the per-location counters summed,
    so an error planted in `memory_errors` reads the same through both calls."""
    def total(err: int, cnt: int) -> str:
        return f"{sum(loc[err][cnt] for loc in mem_err)}ull"
    return {"ecc_vol_unc": total(1, 0), "ecc_agg_unc": total(1, 1), "ecc_vol_cor": total(0, 0),
            "ecc_agg_cor": total(0, 1)}


def expand_machine(spec: dict[str, Any], seed: str = "") -> dict[str, Any]:
    """Pure: the fixture spec -> the tables the C library serves."""
    name = spec["machine"]
    spec, gpus = _machine_gpus(spec)
    links = _links(spec, gpus)
    bus = [g["bus_id"] for g in gpus]
    cpus = (spec.get("cpus") or {}).get("per_numa") or ["0-63"]
    out_gpus = [{**_gpu_identity(g, i, (seed, name, g["bus_id"])),
                 **_gpu_readings(g, cpus, links[i], _hex_id(seed, name, "cluster"))} for i, g in enumerate(gpus)]
    n = len(gpus)
    topo = [[0 if i == j else _level(spec, gpus, i, j) for j in range(n)] for i in range(n)]
    drv = spec["driver_version"]
    return {"machine": name, "init_rc": NVML_ERRORS[spec.get("init_error", "SUCCESS")],
            "driver_version": drv, "driver_branch": int(drv.split(".")[0]),
            "nvml_version": spec.get("nvml_version", drv), "cuda_version": int(spec.get("cuda_driver_version", 0)),
            "gpus": out_gpus, "links": links, "topo": topo, "p2p": _p2p_table(spec, out_gpus, links, bus)}


def _machine_gpus(spec: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The machine's GPUs: the template merged into each, less `remove_gpus`, with
    `gpu_overrides` applied (a copy of the spec that also carries every bus id as `_all_bus`)."""
    name = spec["machine"]
    template = spec.get("gpu") or {}
    all_gpus = [_deep_merge(template, g) for g in spec.get("gpus") or []]
    spec = dict(spec)
    spec["_all_bus"] = [g["bus_id"] for g in all_gpus]
    overrides = spec.get("gpu_overrides") or {}
    unknown_bus = set(overrides) - set(spec["_all_bus"])
    removed = set(spec.get("remove_gpus") or [])
    if unknown_bus or removed - set(spec["_all_bus"]):
        raise FixtureError(f"{name}: overrides name bus ids not in the machine: {sorted(unknown_bus | removed)}")
    return spec, [_deep_merge(g, overrides.get(g["bus_id"], {})) for g in all_gpus if g["bus_id"] not in removed]


def _gpu_identity(g: dict[str, Any], i: int, salt: tuple[str, str, str]) -> dict[str, Any]:
    """What the GPU is and how it is set up: ids, memory, modes, MIG, PCIe link."""
    mig = g.get("mig") or {}
    n_inst = int(mig.get("instances", 0)) if mig.get("current") else 0
    return {
        "bus_id": g["bus_id"], "name": g["name"],
        "uuid": _uuid("GPU", *salt),
        "serial": str(int(_hex_id("serial", *salt, n=8), 16) % 10**13).zfill(13) if g.get("serial", True) else None,
        "part": g.get("board_part_number"), "vbios": g.get("vbios"), "inforom": g.get("inforom_image"),
        "pci_device_id": (int(g.get("pci_device_id", 0)) << 16) | 0x10DE, "minor": i,
        "mem_total": int(g.get("memory_total", 0)), "mem_used": int(g.get("memory_used", 0)),
        "arch": int(g.get("architecture", 0)),
        "cc": list(g.get("compute_capability", [0, 0])),
        "persistence": int(g.get("persistence", 1)), "compute_mode": int(g.get("compute_mode", 0)),
        "virt_mode": int(g.get("virtualization_mode", 0)),
        "mig_capable": int(bool(g.get("mig_capable", False))),
        "mig_current": int(bool(mig.get("current"))), "mig_pending": int(bool(mig.get("pending", mig.get("current")))),
        "nmig": n_inst,
        "migs": [{"name": f"{g['name']} MIG {mig.get('profile', '3g.40gb')}",
                  "uuid": _uuid("MIG", *salt, str(k)), "mem": int(mig.get("memory", 0))} for k in range(n_inst)],
        "gen_cur": g["pcie"].get("gen_current", g["pcie"]["gen"]), "gen_max": g["pcie"]["gen"],
        "gen_gpu_max": g["pcie"].get("gen_gpu", g["pcie"]["gen"]),
        "width_cur": g["pcie"].get("width_current", g["pcie"]["width"]), "width_max": g["pcie"]["width"],
    }


def _gpu_readings(g: dict[str, Any], cpus: list[str], links: list[dict[str, Any]],
                  cluster_uuid: str) -> dict[str, Any]:
    """What the GPU reports: placement, sensors, ECC, fabric, NVLink count, faults, limits."""
    fabric: Any = g.get("fabric")  # a mapping or None, as the fixture has it
    fans = g.get("fans")
    return {
        "numa_node": int(g.get("gpu_numa_id", -1)),
        "cpu_mask": _cpumask(cpus[int(g.get("numa", 0)) % len(cpus)]),
        "temp": int(g.get("temperature", 35)),
        "nfans": len(fans) if fans is not None else -1, "fan_pct": list(fans or []),
        "power_mw": int(float(g.get("power_w", 60)) * 1000),
        "ecc_supported": int(g.get("ecc", True) is not None), "ecc_mode": int(bool(g.get("ecc", True))),
        "remap_supported": int(g.get("remapped_rows") is not None),
        "remap": g.get("remapped_rows") or {},
        "fabric_supported": int(fabric is not None),
        "fabric_state": FABRIC_STATES[(fabric or {}).get("state", "not_supported")],
        "clique": int((fabric or {}).get("clique_id", 0)),
        "cluster_uuid": cluster_uuid,
        "health_summary": ({"healthy": 1, "unhealthy": 2, "limited_capacity": 3}[fabric["health_summary"]]
                           if (fabric or {}).get("health_summary") else
                           1 if (fabric or {}).get("state") == "completed" else 0),
        "lost": int(bool(g.get("lost"))),
        "nlinks": len(links) if links else -1,
        "nvlink_version": int(g.get("nvlink_version", 0)),
        "fails": {k: NVML_ERRORS[v] for k, v in (g.get("fails") or {}).items()},
        # a wedged driver: {nvmlDeviceGetHandleByIndex_v2: 30} makes that call sleep 30 s first
        "hangs": {str(k): int(v) for k, v in (g.get("hangs") or {}).items()},
        "power_limit_mw": int(float(g.get("power_limit_w", g.get("power_default_limit_w", 0))) * 1000),
        "power_default_mw": int(float(g.get("power_default_limit_w", 0)) * 1000),
        "power_enforced_mw": int(float(g.get("power_limit_w", g.get("power_default_limit_w", 0))) * 1000),
        "clock_reasons": _clock_bits(g.get("clock_reasons", ["gpu_idle"])),
        "mem_err": _mem_errors(g.get("memory_errors") or {}),
        "pcie_replays": int(g.get("pcie_replays", 0)),
        "retired_pending": int(g["retired_pages_pending"]) if "retired_pages_pending" in g else -1,
        "viol_supported": int(g.get("violation_ns", {}) is not None),
        "viol_ns": _violations(g.get("violation_ns")),
        "slowdown_c": int((g.get("temperature_thresholds") or {}).get("slowdown", 0)),
        "shutdown_c": int((g.get("temperature_thresholds") or {}).get("shutdown", 0)),
        "margin_supported": int(bool((g.get("temperature_thresholds") or {}).get("slowdown"))
                                or "margin_temperature" in g),
        "margin_c": int(g.get("margin_temperature",
                              int((g.get("temperature_thresholds") or {}).get("slowdown", 0))
                              - int(g.get("temperature", 35)))),
        "recovery_action": (RECOVERY_ACTIONS[g.get("recovery_action", "NONE")]
                            if g.get("recovery_action", "NONE") is not None else -1),
        "health_mask": _health_mask((fabric or {}).get("health")),
    }


def _p2p_table(spec: dict[str, Any], out_gpus: list[dict[str, Any]], links: list[list[dict[str, Any]]],
               bus: list[str]) -> list[list[list[int]]]:
    """nvmlDeviceGetP2PStatus per GPU pair and capability (read, write, nvlink, atomics, prop)."""
    n = len(out_gpus)
    p2p_cfg = spec.get("p2p") or {}
    p2p = []
    for i in range(n):
        row = []
        for j in range(n):
            if i == j:
                row.append([0, 0, 0, 0, 0])
                continue
            if out_gpus[i]["mig_current"] or out_gpus[j]["mig_current"]:
                row.append([P2P["NS"]] * 5)  # no P2P between MIG-partitioned GPUs
                continue
            nvl = _nvlinked(links, i, j, bus)
            pcie = P2P[p2p_cfg.get("pcie", "OK")]
            row.append([P2P["OK"] if nvl else pcie, P2P["OK"] if nvl else pcie,
                        P2P["OK"] if nvl else P2P["NS"], P2P["OK"] if nvl else P2P["NS"], pcie])
        p2p.append(row)
    for i, j, cap in spec.get("p2p_overrides") or []:
        p2p[i][j] = [P2P[cap]] * 5
    return p2p


def _c_str(s: str | None) -> str:
    return "NULL" if s is None else json.dumps(s)  # JSON escaping is valid C for our ASCII strings


def render_header(t: dict[str, Any]) -> str:
    n = len(t["gpus"])
    maxlink = max([len(x) for x in t["links"]] + [1])
    maxmig = max([g["nmig"] for g in t["gpus"]] + [1])
    lines = [f"/* generated by orchestrator/simulate/fake_nvml.py for {t['machine']} */",
             f"#define FAKE_NGPU {max(n, 0)}", f"#define FAKE_DRV {t['driver_branch']}",
             f"#define FAKE_INIT_RC {t['init_rc']}",
             f"#define FAKE_DRIVER_VERSION {_c_str(t['driver_version'])}",
             f"#define FAKE_NVML_VERSION {_c_str(t['nvml_version'])}",
             f"#define FAKE_CUDA_VERSION {t['cuda_version']}",
             f"#define FAKE_MAXLINK {maxlink}", f"#define FAKE_MAXMIG {maxmig}",
             "static const fake_gpu_t FAKE_GPUS[FAKE_NGPU > 0 ? FAKE_NGPU : 1] = {"]
    for g in t["gpus"]:
        fails = "," + ",".join(f"{k}={v}" for k, v in g["fails"].items()) + "," if g["fails"] else None
        hangs = "," + ",".join(f"{k}={v}" for k, v in g["hangs"].items()) + "," if g["hangs"] else None
        r = g["remap"]
        fields = {
            "bus_id": _c_str(g["bus_id"]), "name": _c_str(g["name"]), "uuid": _c_str(g["uuid"]),
            "serial": _c_str(g["serial"]), "part": _c_str(g["part"]), "vbios": _c_str(g["vbios"]),
            "inforom": _c_str(g["inforom"]), "pci_device_id": f"0x{g['pci_device_id']:08x}u", "minor": g["minor"],
            "mem_total": f"{g['mem_total']}ull", "mem_used": f"{g['mem_used']}ull",
            "arch": g["arch"], "cc_major": g["cc"][0], "cc_minor": g["cc"][1],
            "persistence": g["persistence"], "compute_mode": g["compute_mode"], "virt_mode": g["virt_mode"],
            "mig_capable": g["mig_capable"], "mig_current": g["mig_current"], "mig_pending": g["mig_pending"],
            "nmig": g["nmig"], "gen_cur": g["gen_cur"], "gen_max": g["gen_max"], "gen_gpu_max": g["gen_gpu_max"],
            "width_cur": g["width_cur"], "width_max": g["width_max"], "numa_node": g["numa_node"],
            "cpu_mask": "{" + ", ".join(f"0x{w:x}ul" for w in g["cpu_mask"]) + "}",
            "temp": g["temp"], "nfans": g["nfans"],
            "fan_pct": "{" + ", ".join(str(x) for x in (g["fan_pct"] + [0, 0, 0, 0])[:4]) + "}",
            "power_mw": g["power_mw"], "ecc_supported": g["ecc_supported"], "ecc_mode": g["ecc_mode"],
            "remap_supported": g["remap_supported"], "remap_cor": int(r.get("correctable", 0)),
            "remap_unc": int(r.get("uncorrectable", 0)), "remap_pending": int(r.get("pending", 0)),
            "remap_failure": int(r.get("failure", 0)), "fabric_supported": g["fabric_supported"],
            "fabric_state": g["fabric_state"], "fabric_status": 0, "clique": g["clique"],
            "cluster_uuid": "{" + ", ".join(f"0x{g['cluster_uuid'][k:k + 2]}" for k in range(0, 32, 2)) + "}",
            "health_mask": g["health_mask"], "health_summary": g["health_summary"], "lost": g["lost"],
            "nlinks": g["nlinks"], "nvlink_version": g["nvlink_version"], "fails": _c_str(fails),
            "hangs": _c_str(hangs),
            "power_limit_mw": g["power_limit_mw"], "power_default_mw": g["power_default_mw"],
            "power_enforced_mw": g["power_enforced_mw"], "clock_reasons": f"0x{g['clock_reasons']:x}ull",
            "mem_err": json.dumps(g["mem_err"]).replace("[", "{").replace("]", "}"),
            **_ecc_totals(g["mem_err"]),
            "pcie_replays": g["pcie_replays"], "retired_pending": g["retired_pending"],
            "viol_supported": g["viol_supported"],
            "viol_ns": "{" + ", ".join(f"{v}ull" for v in g["viol_ns"]) + "}",
            "margin_supported": g["margin_supported"], "margin_c": g["margin_c"],
            "slowdown_c": g["slowdown_c"], "shutdown_c": g["shutdown_c"], "recovery_action": g["recovery_action"],
        }
        lines.append("  {" + ", ".join(f".{k} = {v}" for k, v in fields.items()) + "},")
    lines.append("};")
    lines.append("static const fake_link_t FAKE_LINKS[FAKE_NGPU > 0 ? FAKE_NGPU : 1][FAKE_MAXLINK] = {")
    for gl in t["links"] or [[]]:
        cells = [f"{{{lk['active']}, {_c_str(lk['remote'])}, {NVLINK_TYPES[lk['type']]}, "
                 f"{{{', '.join(str(e) + 'ull' for e in lk['err'])}}}}}" for lk in gl]
        lines.append("  {" + ", ".join(cells or ["{0, NULL, 0, {0}}"]) + "},")
    lines.append("};")
    lines.append("static const fake_mig_t FAKE_MIGS[FAKE_NGPU > 0 ? FAKE_NGPU : 1][FAKE_MAXMIG] = {")
    for g in t["gpus"] or [{"migs": []}]:
        cells = [f"{{{_c_str(m['name'])}, {_c_str(m['uuid'])}, {m['mem']}ull}}" for m in g["migs"]]
        lines.append("  {" + ", ".join(cells or ["{NULL, NULL, 0}"]) + "},")
    lines.append("};")

    def matrix(m: list[list[Any]]) -> str:
        return "{" + ", ".join("{" + ", ".join(json.dumps(c).replace("[", "{").replace("]", "}") for c in row) + "}"
                               for row in m) + "}" if m else "{{0}}"

    lines.append(f"static const int FAKE_TOPO[FAKE_NGPU > 0 ? FAKE_NGPU : 1][FAKE_NGPU > 0 ? FAKE_NGPU : 1] = {matrix(t['topo'])};")
    lines.append(f"static const int FAKE_P2P[FAKE_NGPU > 0 ? FAKE_NGPU : 1][FAKE_NGPU > 0 ? FAKE_NGPU : 1][5] = {matrix(t['p2p'])};")
    return "\n".join(lines) + "\n"


def resolve_machine(machine: str | dict[str, Any]) -> dict[str, Any]:
    """A fixture by name, or a description given as a mapping (`machine`: its name, `base`: the
    fixture it overrides, as a variant file would): a test plants a fault without a file."""
    if isinstance(machine, str):
        return load_machine(machine)
    over = dict(machine)
    base = over.pop("base", None)
    spec = _deep_merge(load_machine(base), over) if base else over
    spec["machine"] = str(over.get("machine") or "custom")
    return spec


def build_fake_nvml(machine: str | dict[str, Any], dest_dir: Path, seed: str = "") -> Path:
    """Compile (or reuse) the fake library for `machine` (a fixture name or a description:
    resolve_machine); returns the path of libnvidia-ml.so.1.

    `seed` salts the generated UUIDs and serials: hosts built with different seeds have distinct
    identities, hosts with the same seed (deliberately) share them.
    """
    spec = resolve_machine(machine)
    header = render_header(expand_machine(spec, seed))
    try:
        return build_shared_library(C_SOURCE, "fake_nvml_data.h", header, "libnvidia-ml.so.1", Path(dest_dir),
                                    spec["machine"], ["-O1", "-Wall", "-Wno-unused-function"])
    except BuildError as e:
        raise FixtureError(str(e)) from None
