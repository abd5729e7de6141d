#!/usr/bin/env python3
"""Device check for the `nvml` and `nvlink` probes on a real NVIDIA machine.

Runs both probes exactly as the controller ships them (build_script piped to `python3 -`, real
libnvidia-ml.so.1), then compares what they report with `nvidia-smi -q -x`, `nvidia-smi nvlink -s`,
`nvidia-smi topo -m` and nvidia-ml-py (`pynvml`): count, names, UUIDs, bus ids, memory, NVLink
states, PCIe gen/width, MIG, and the topo matrix.  Prints a compact table of mismatches and the
probes' run times; writes everything to $OUT/nvml_check.json when OUT is set.

Never crashes on a missing tool or field: whatever cannot be compared is listed as skipped.  Every
external command has a timeout; the whole run stays well under 60 s.

    python3 tools/devcheck/nvml_check.py [--lib /path/libnvidia-ml.so.1] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.engine.payload import build_script  # noqa: E402
from orchestrator.facts.normalize import gpus as norm_gpus  # noqa: E402
from orchestrator.facts.normalize import nvlink as norm_nvlink  # noqa: E402
from orchestrator.facts.normalize import topology as norm_topology  # noqa: E402
from orchestrator.verdict.checks import gpu as gpu_checks  # noqa: E402
from orchestrator.verdict.checks.base import HostView  # noqa: E402

T_START = time.monotonic()
BUDGET_S = 50.0
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def left() -> float:
    return max(1.0, BUDGET_S - (time.monotonic() - T_START))


def sh(cmd: list[str], timeout: float = 20.0) -> tuple[int | None, str, str]:
    if not shutil.which(cmd[0]):
        return None, "", f"{cmd[0]} not found"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=min(timeout, left()))
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", f"{' '.join(cmd)} timed out"
    except OSError as e:
        return None, "", str(e)


def run_probe(name: str, lib: str | None, runs: int) -> dict[str, Any]:
    args = {"lib": lib} if lib else {}
    script = build_script(name, args, deadline_s=20)
    out: dict[str, Any] = {"runs": [], "envelope": None}
    for _ in range(runs):
        t0 = time.perf_counter()
        try:
            p = subprocess.run(["python3", "-"], input=script, capture_output=True, timeout=min(25, left()))
        except subprocess.TimeoutExpired:
            out["runs"].append({"wall_s": None, "error": "timeout"})
            break
        wall = time.perf_counter() - t0
        try:
            env = json.loads(p.stdout.decode("utf-8", "replace"))
        except ValueError:
            out["runs"].append({"wall_s": wall, "error": "invalid output", "stderr": p.stderr[-500:].decode()})
            break
        out["runs"].append({"wall_s": round(wall, 4), "duration_s": env.get("duration_s"), "status": env.get("status")})
        out["envelope"] = env
        if env.get("status") != "ok":
            break
    walls = [r["wall_s"] for r in out["runs"] if r.get("wall_s")]
    durs = [r["duration_s"] for r in out["runs"] if r.get("duration_s") is not None]
    out["wall_median_s"] = round(statistics.median(walls), 4) if walls else None
    out["duration_median_s"] = round(statistics.median(durs), 4) if durs else None
    return out


def _txt(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    el = node.find(path)
    return el.text.strip() if el is not None and el.text else None


def _num(text: str | None) -> float | None:
    m = re.search(r"-?\d+(?:\.\d+)?", text or "")
    return float(m.group(0)) if m else None


def smi_facts() -> dict[str, Any]:
    rc, out, err = sh(["nvidia-smi", "-q", "-x"], 25)
    if rc != 0:
        return {"error": err.strip() or f"nvidia-smi exited {rc}"}
    try:
        root = ET.fromstring(out)
    except ET.ParseError as e:
        return {"error": f"nvidia-smi XML unparseable: {e}"}
    gpus = {}
    for g in root.findall("gpu"):
        bus = norm_gpus.bus_id(g.get("id") or _txt(g, "pci/pci_bus_id"))
        gpus[bus] = {
            "name": _txt(g, "product_name"), "uuid": _txt(g, "uuid"), "serial": _txt(g, "serial"),
            "memory_total_mib": _num(_txt(g, "fb_memory_usage/total")),
            "gen_current": _num(_txt(g, "pci/pci_gpu_link_info/pcie_gen/current_link_gen")),
            "gen_max": _num(_txt(g, "pci/pci_gpu_link_info/pcie_gen/max_link_gen")),
            "width_current": _num(_txt(g, "pci/pci_gpu_link_info/link_widths/current_link_width")),
            "width_max": _num(_txt(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
            "mig_current": _txt(g, "mig_mode/current_mig"),
            "virtualization": _txt(g, "gpu_virtualization_mode/virtualization_mode"),
            "fabric_state": _txt(g, "fabric/state"),
            "fan": _txt(g, "fan_speed"),
            "temperature": _num(_txt(g, "temperature/gpu_temp")),
        }
    links: dict[int, list[bool]] = {}
    rc, out, _ = sh(["nvidia-smi", "nvlink", "-s"], 15)
    if rc == 0:
        cur = None
        for line in out.splitlines():
            m = re.match(r"^GPU (\d+):", line)
            if m:
                cur = int(m.group(1))
                links[cur] = []
            m = re.match(r"^\s+Link (\d+):\s*(.*)$", line)
            if m and cur is not None:
                links[cur].append("inactive" not in m.group(2).lower())
    topo: list[list[str]] = []
    rc, out, _ = sh(["nvidia-smi", "topo", "-m"], 15)
    if rc == 0:
        for line in ANSI.sub("", out).splitlines():
            if re.match(r"^GPU\d+\s", line):
                topo.append(line.split()[1:])
    return {"driver": _txt(root, "driver_version"), "count": len(gpus), "gpus": gpus,
            "nvlink_active": links, "topo": topo}


def pynvml_facts() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError as e:
        return {"error": f"pynvml not importable: {e}"}
    try:
        pynvml.nvmlInit()
    except Exception as e:
        return {"error": f"pynvml nvmlInit: {e}"}
    out: dict[str, Any] = {"gpus": {}}

    def get(fn: Any, *a: Any) -> Any:
        try:
            v = fn(*a)
            return v.decode() if isinstance(v, bytes) else v
        except Exception as e:
            return {"error": type(e).__name__}

    try:
        out["count"] = pynvml.nvmlDeviceGetCount()
        for i in range(out["count"]):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            pci = get(pynvml.nvmlDeviceGetPciInfo, h)
            bus = norm_gpus.bus_id(pci.busId.decode() if hasattr(pci, "busId") and isinstance(pci.busId, bytes)
                                   else getattr(pci, "busId", None))
            mem = get(pynvml.nvmlDeviceGetMemoryInfo, h)
            mig = get(pynvml.nvmlDeviceGetMigMode, h)
            states = []
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                st = get(pynvml.nvmlDeviceGetNvLinkState, h, link)
                if isinstance(st, dict):
                    break
                states.append(bool(st))
            out["gpus"][bus] = {
                "index": i, "name": get(pynvml.nvmlDeviceGetName, h), "uuid": get(pynvml.nvmlDeviceGetUUID, h),
                "memory_total": getattr(mem, "total", None),
                "gen_current": get(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "gen_max": get(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "width_current": get(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "width_max": get(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "mig_current": mig[0] if isinstance(mig, (list, tuple)) else None,
                "nvlink_active": states,
            }
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return out


def compare(gfacts: dict[str, Any], lfacts: dict[str, Any] | None, topo: dict[str, Any],
            smi: dict[str, Any], pyn: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def add(source: str, subject: str, field: str, mine: Any, theirs: Any, equal: bool | None = None) -> None:
        ok = (mine == theirs) if equal is None else equal
        rows.append({"source": source, "subject": subject, "field": field, "probe": mine, "other": theirs, "match": ok})

    links_by_bus = {g.get("bus_id"): g for g in (lfacts or {}).get("gpus") or []}
    for src, facts in (("nvidia-smi", smi), ("pynvml", pyn)):
        if "error" in facts:
            continue
        add(src, "host", "gpu count", gfacts.get("count"), facts.get("count"))
        for g in gfacts.get("list") or []:
            bus = g.get("bus_id")
            o = (facts.get("gpus") or {}).get(bus)
            subj = f"GPU{g.get('index')} {bus}"
            if o is None:
                add(src, subj, "present", True, False)
                continue
            add(src, subj, "name", g.get("name"), o.get("name"))
            add(src, subj, "uuid", g.get("uuid"), o.get("uuid"))
            mem = g.get("memory_total_bytes")
            if src == "nvidia-smi":
                mib = round(mem / 2**20) if mem else None
                add(src, subj, "memory MiB", mib, o.get("memory_total_mib"),
                    None if mib is None or o.get("memory_total_mib") is None
                    else abs(mib - o["memory_total_mib"]) <= 1)
            else:
                add(src, subj, "memory bytes", mem, o.get("memory_total"))
            p = g.get("pcie") or {}
            for key in ("gen_current", "gen_max", "width_current", "width_max"):
                theirs = o.get(key)
                theirs = int(theirs) if isinstance(theirs, (int, float)) else theirs
                add(src, subj, f"pcie {key}", p.get(key), theirs)
            mig = (g.get("mig") or {}).get("current")
            theirs_mig = o.get("mig_current")
            if src == "nvidia-smi":
                theirs_mig = None if theirs_mig in (None, "N/A") else theirs_mig.lower() == "enabled"
            elif isinstance(theirs_mig, int):
                theirs_mig = theirs_mig == 1
            else:
                theirs_mig = None
            add(src, subj, "mig current", mig, theirs_mig)
            lk = links_by_bus.get(bus) or {}
            up = lk.get("links_up")
            if src == "nvidia-smi":
                smi_links = (facts.get("nvlink_active") or {}).get(g.get("index"))
                if smi_links is not None:
                    add(src, subj, "nvlink active", up, sum(smi_links))
            else:
                states = o.get("nvlink_active") or []
                add(src, subj, "nvlink active", up, sum(states))
                add(src, subj, "nvlink count", lk.get("links_total"), len(states),
                    None if not states else lk.get("links_total") == len(states))
    if smi.get("topo"):
        mat = topo.get("matrix") or []
        n = len([d for d in topo.get("devices") or [] if d["kind"] == "gpu"])
        mine = [[c or "?" for c in row[:n]] for row in mat[:n]]
        theirs = [row[:n] for row in smi["topo"][:n]]
        add("nvidia-smi", "host", "topo -m GPU matrix", mine, theirs)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="path of libnvidia-ml.so.1 (default: the loader's)")
    ap.add_argument("--runs", type=int, default=3, help="probe runs for timing (median reported)")
    a = ap.parse_args()
    result: dict[str, Any] = {"host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    probes = {name: run_probe(name, a.lib, max(1, a.runs)) for name in ("nvml", "nvlink")}
    result["probes"] = {k: {kk: vv for kk, vv in v.items() if kk != "envelope"} for k, v in probes.items()}
    env = probes["nvml"]["envelope"] or {}
    lenv = probes["nvlink"]["envelope"] or {}
    result["envelopes"] = {"nvml": env, "nvlink": lenv}
    print("probe   status       median duration   median process wall")
    for name, p in probes.items():
        e = p["envelope"] or {}
        print(f"{name:7s} {e.get('status')!s:12s} {p['duration_median_s']!s:>10s} s      {p['wall_median_s']!s:>10s} s")
    if env.get("status") != "ok":
        reason = "; ".join(env.get("errors") or []) or "no envelope"
        print(f"no NVIDIA library / driver usable: {reason}")
        result["status"] = "unsupported"
        result["reason"] = reason
    else:
        gfacts = norm_gpus.normalize(env.get("data") or {})
        lfacts = norm_nvlink.normalize(lenv.get("data") or {}) if lenv.get("status") == "ok" else None
        topo = norm_topology.merge(gfacts, lfacts, None)
        smi = smi_facts()
        pyn = pynvml_facts()
        result["nvidia_smi"] = smi
        result["pynvml"] = {k: v for k, v in pyn.items()}
        rows = compare(gfacts, lfacts, topo, smi, pyn)
        result["comparisons"] = rows
        reasons: dict[str, dict[str, int]] = {}
        for g in gfacts.get("list") or []:
            for field, why in (g.get("unknown") or {}).items():
                reasons.setdefault(field, {}).setdefault(str(why), 0)
                reasons[field][str(why)] += 1
        result["unknown_fields"] = reasons
        result["missing_symbols"] = gfacts.get("missing_symbols")
        bad = [r for r in rows if r["match"] is False]
        result["status"] = "ok"
        result["mismatches"] = len(bad)
        for src, facts in (("nvidia-smi", smi), ("pynvml", pyn)):
            if "error" in facts:
                print(f"{src}: skipped ({facts['error']})")
        print(f"compared {len(rows)} values, {len(bad)} mismatch(es)")
        if bad:
            print(f"{'source':11s} {'subject':24s} {'field':20s} probe | other")
            for r in bad:
                print(f"{r['source']:11s} {r['subject'][:24]:24s} {r['field'][:20]:20s} "
                      f"{json.dumps(r['probe'])[:60]} | {json.dumps(r['other'])[:60]}")
        print("fields NVML refused:", json.dumps(reasons, sort_keys=True))
        # what the controller's checks would say about this real machine (false positives show here)
        view = HostView(result["host"], {"gpus": gfacts, "nvlink": lfacts} if lfacts else {"gpus": gfacts},
                        {"nvml": "ok", "nvlink": "ok" if lfacts else "failed"})
        found = [f.to_dict() for check in gpu_checks.CHECKS for f in check(view)]
        result["findings"] = found
        for f in found:
            print(f"finding {f['severity']}/{f['kind']} {f['id']} {f['subject']}: {f['message']}")
        result["topology"] = topo
    result["total_s"] = round(time.monotonic() - T_START, 2)
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "nvml_check.json"
        path.write_text(json.dumps(result, indent=1, default=str, sort_keys=True))
        print(f"wrote {path}")
    print(f"total {result['total_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
