#!/usr/bin/env python3
"""Device check: every GPU-touching probe, one at a time, on a real NVIDIA machine.

Each probe runs exactly as the controller ships it (build_script piped to `python3 -`) under a
timeout, and its envelope is checked: an answer (never a crash or a silence), the driver's
watchdog quiet on a healthy machine (no `unresponsive` call), and, where a reference is installed,
its figures against it:

* nvml, newer fields (R570+: recovery action, thermal thresholds and margin, remapped rows, PCIe
  replays, fabric state, memory): nvidia-ml-py (`pynvml`), GPU by GPU;
* nccl (single host, every GPU): nccl-tests' `all_reduce_perf` on PATH (bus bandwidth at 256 MiB)
  and PyTorch's NCCL version;
* p2p, nvlink, kmsg, nic, pcie, fabric (role discover): an answer and their own errors.

Whatever cannot be compared is listed as skipped; the whole run keeps to --budget (150 s).
NCCL_LIB names a libnccl.so.2 the probe's own search would not find (a venv's wheel).
Writes $OUT/probes_check.json when OUT is set.

    python3 tools/devcheck/probes_check.py [--only nvml,nccl] [--budget 150]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.engine.payload import build_script  # noqa: E402

# Every probe that touches a GPU, its driver or what a GPU fault leaves behind, with arguments for
# one short run (tests/tools/test_devcheck.py fails when a GPU probe is missing here).
PROBES: dict[str, tuple[dict[str, Any], float]] = {  # name -> (arguments, deadline s)
    "nvml": ({}, 20.0),
    "nvlink": ({}, 20.0),
    "pcie": ({}, 20.0),
    "kmsg": ({}, 20.0),
    "nic": ({}, 20.0),
    "p2p": ({"budget_s": 25, "size_mb": 64, "repeats": 3}, 40.0),
    "nccl": ({"budget_s": 25, "min_bytes": 1 << 20, "max_bytes": 256 << 20}, 40.0),
    "fabric": ({"role": "discover"}, 20.0),
}


def run_probe(name: str, left: float) -> tuple[dict[str, Any] | None, str | None, float]:
    """(envelope, what went wrong, wall seconds); `left`: seconds this check may still spend."""
    args, deadline = PROBES[name]
    deadline = min(deadline, max(5.0, left - 10))
    if os.environ.get("NCCL_LIB") and name == "nccl":  # a libnccl.so.2 the probe's search would miss
        args = dict(args, nccl_lib=os.environ["NCCL_LIB"])
    t0 = time.perf_counter()
    try:
        p = subprocess.run(["python3", "-"], input=build_script(name, args, deadline_s=deadline),
                           capture_output=True, timeout=deadline + 10)
    except subprocess.TimeoutExpired:
        return None, "no answer within %.0f s" % (deadline + 10), time.perf_counter() - t0
    wall = time.perf_counter() - t0
    try:
        return json.loads(p.stdout.decode("utf-8", "replace")), None, wall
    except ValueError:
        return None, f"invalid output (rc {p.returncode}): {p.stderr[-400:].decode('utf-8', 'replace')}", wall


def _pynvml_newer_fields(index: int) -> dict[str, Any]:
    """The newer readings of GPU `index` as nvidia-ml-py reads them (each None where it cannot)."""
    import pynvml as n  # type: ignore[import-not-found,import-untyped,unused-ignore]

    h = n.nvmlDeviceGetHandleByIndex(index)

    def read(fn: Any) -> Any:
        try:
            return fn()
        except n.NVMLError:
            return None

    def recovery() -> Any:
        [fv] = n.nvmlDeviceGetFieldValues(h, [n.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
        return fv.value.uiVal if fv.nvmlReturn == 0 else None

    return {
        "recovery_action_code": read(recovery),
        "slowdown_c": read(lambda: n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)),
        "shutdown_c": read(lambda: n.nvmlDeviceGetTemperatureThreshold(h, n.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN)),
        "remapped": read(lambda: tuple(n.nvmlDeviceGetRemappedRows(h)[:2])),
        "pcie_replays": read(lambda: n.nvmlDeviceGetPcieReplayCounter(h)),
        "memory_total_bytes": read(lambda: n.nvmlDeviceGetMemoryInfo(h).total),
    }


def check_nvml(env: dict[str, Any]) -> list[str]:
    try:
        import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

        pynvml.nvmlInit()
    except Exception as e:
        return [f"skipped: nvidia-ml-py not usable here ({e})"]
    codes = {v: k for k, v in _recovery_names().items()}
    out = []
    for g in (env.get("data") or {}).get("gpus") or []:
        ref = _pynvml_newer_fields(g["index"])
        mine = {"recovery_action_code": codes.get(g.get("recovery_action")),
                "slowdown_c": (g.get("thermal") or {}).get("slowdown_c"),
                "shutdown_c": (g.get("thermal") or {}).get("shutdown_c"),
                "remapped": (tuple(g["remapped_rows"][k] for k in ("correctable", "uncorrectable"))
                             if g.get("remapped_rows") else None),
                "pcie_replays": g.get("pcie_replays"), "memory_total_bytes": g.get("memory_total_bytes")}
        for key, want in ref.items():
            got = mine[key]
            verdict = "ok" if got == want else ("moved" if key == "pcie_replays" and None not in (got, want)
                                                 and got <= want else "MISMATCH")
            out.append(f"GPU {g['index']} {key}: probe {got!r}, nvidia-ml-py {want!r}: {verdict}")
    pynvml.nvmlShutdown()
    return out


def _recovery_names() -> dict[int, str]:
    import ast

    tree = ast.parse((ROOT / "probes" / "_nvml.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RECOVERY_ACTIONS":
            return dict(ast.literal_eval(node.value))
    return {}


def check_nccl(env: dict[str, Any]) -> list[str]:
    data = env.get("data") or {}
    out = ["library {} ({})".format((data.get("library") or {}).get("version"), (data.get("library") or {}).get("path"))]
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]

        out.append("PyTorch's NCCL: {}".format(".".join(str(p) for p in torch.cuda.nccl.version())))
    except Exception as e:
        out.append(f"skipped: PyTorch not usable here ({type(e).__name__})")
    mine = [r for r in data.get("results") or [] if r.get("size_bytes") == 256 << 20 and r.get("op") == "all_reduce"]
    tool = shutil.which("all_reduce_perf")
    if not tool:
        return [*out, "skipped: nccl-tests' all_reduce_perf not on PATH"]
    gpus = len(data.get("selected") or data.get("gpus") or [])
    try:
        p = subprocess.run([tool, "-b", "256M", "-e", "256M", "-g", str(max(1, gpus)), "-n", "20"],
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return [*out, "all_reduce_perf: no answer within 120 s"]
    rows = [line.split() for line in p.stdout.splitlines() if re.match(r"\s*268435456\s", line)]
    theirs = float(rows[0][7]) if rows and len(rows[0]) > 7 else None  # out-of-place busbw
    ours = mine[0].get("busbw_gbps") if mine else None
    verdict = ("ok" if theirs and ours and abs(ours - theirs) <= 0.15 * theirs else "MISMATCH")
    return [*out, f"busbw at 256 MiB: probe {ours} GB/s, all_reduce_perf {theirs} GB/s: {verdict}"]


CHECKS = {"nvml": check_nvml, "nccl": check_nccl}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", help="comma-separated probe names (default: all)")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds for the whole check (default 150)")
    a = ap.parse_args()
    names = a.only.split(",") if a.only else list(PROBES)
    report: dict[str, Any] = {}
    bad = 0
    end = time.monotonic() + a.budget
    for name in names:
        if end - time.monotonic() < 15:
            print(f"=== {name}\n  NOT RUN: the check's budget is spent", flush=True)
            bad += 1
            continue
        env, problem, wall = run_probe(name, end - time.monotonic())
        lines = [problem] if problem else []
        if env is not None:
            data = env.get("data") or {}
            lines.append("status {} in {:.1f} s; errors {}".format(env.get("status"), wall, env.get("errors") or "none"))
            if data.get("unresponsive"):
                lines.append("WATCHDOG FIRED on a healthy machine: {}".format(data["unresponsive"]))
            if name in CHECKS and env.get("status") == "ok":
                lines += CHECKS[name](env)
        bad += problem is not None or any("MISMATCH" in s or "WATCHDOG" in s for s in lines)
        print("=== {}\n  {}".format(name, "\n  ".join(lines)), flush=True)
        report[name] = {"wall_s": round(wall, 2), "lines": lines, "envelope": env}
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "probes_check.json").write_text(json.dumps(report, indent=1, default=str))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
