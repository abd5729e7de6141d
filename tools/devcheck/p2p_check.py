#!/usr/bin/env python3
"""Device check for the p2p probe: run it on a real GPU and compare with PyTorch (or CuPy).

Run from the repository root on a machine with an NVIDIA GPU:  python3 tools/devcheck/p2p_check.py
1. loads the probe's embedded PTX with the real driver (the first thing that can break),
2. runs the probe as the controller does (build_script piped to `python3 -`), pairs "none",
3. measures the same transfers (pinned h2d, d2h, device-local copy; same sizes, CUDA events,
   warm-up, median of repeats) with PyTorch, else CuPy,
4. prints probe vs reference with ratios and the probe's run time; writes $OUT/p2p_check.json.
Never crashes on a missing piece: each step records what it could not do.  Under 3 minutes.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SIZES_MB = (64, 256)
REPEATS = 5
LOOPS = 4


def embedded_ptx() -> str:
    tree = ast.parse((ROOT / "probes" / "p2p.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_PTX" for t in node.targets):
            return ast.literal_eval(node.value)
    raise RuntimeError("probes/p2p.py has no _PTX constant")


def check_ptx() -> dict:
    """Load the PTX on GPU 0 with the real driver; report the JIT log on failure."""
    out: dict = {"loaded": False}
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        out["error"] = f"no CUDA: libcuda.so.1 not loadable ({e})"
        return out
    vp = ctypes.c_void_p
    rc = cu.cuInit(0)
    if rc:
        out["error"] = f"no CUDA: cuInit returned {rc}"
        return out
    v = ctypes.c_int()
    cu.cuDriverGetVersion(ctypes.byref(v))
    out["driver_cuda"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    ctx = vp()
    rc = cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0)
    if rc:
        out["error"] = f"cuDevicePrimaryCtxRetain returned {rc}"
        return out
    try:
        cu.cuCtxSetCurrent(ctx)
        log = ctypes.create_string_buffer(8192)
        opts = (ctypes.c_int * 2)(5, 6)
        vals = (vp * 2)(ctypes.cast(log, vp), vp(len(log)))
        mod = vp()
        cu.cuModuleLoadDataEx.argtypes = [ctypes.POINTER(vp), ctypes.c_char_p, ctypes.c_uint,
                                          ctypes.POINTER(ctypes.c_int), ctypes.POINTER(vp)]
        t = time.time()
        rc = cu.cuModuleLoadDataEx(ctypes.byref(mod), embedded_ptx().encode() + b"\0", 2, opts, vals)
        out["load_ms"] = round((time.time() - t) * 1e3, 2)
        if rc:
            out["error"] = f"cuModuleLoadDataEx returned {rc}"
            out["jit_log"] = log.value.decode("utf-8", "replace")
            return out
        for name in (b"fp_spin", b"fp_copy"):
            f = vp()
            rc = cu.cuModuleGetFunction(ctypes.byref(f), mod, name)
            out[name.decode()] = rc == 0
        out["loaded"] = all(out.get(n) for n in ("fp_spin", "fp_copy"))
        cu.cuModuleUnload(mod)
    finally:
        cu.cuCtxSetCurrent(None)
        cu.cuDevicePrimaryCtxRelease_v2(0)
    return out


def run_probe(size_mb: int) -> dict:
    from orchestrator.engine.payload import build_script

    args = {"size_mb": size_mb, "repeats": REPEATS, "loops": LOOPS, "pairs": "none", "budget_s": 45, "force": True}
    script = build_script("p2p", args, deadline_s=60.0)
    t = time.time()
    try:
        p = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=75)
    except subprocess.TimeoutExpired:
        return {"error": "probe did not finish within 75 s", "wall_s": round(time.time() - t, 2)}
    wall = round(time.time() - t, 2)
    try:
        env = json.loads(p.stdout)
    except ValueError:
        return {"error": "probe printed no JSON envelope", "stderr": p.stderr.decode()[-2000:], "wall_s": wall}
    return {"envelope": env, "wall_s": wall}


def ref_torch(size_mb: int) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda is not available")
    n = size_mb << 20
    host = torch.empty(n, dtype=torch.uint8).pin_memory()
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty(n, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()

    def timed(fn) -> float:
        samples = []
        for i in range(1 + REPEATS):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.stream(s):
                e0.record(s)
                for _ in range(LOOPS):
                    fn()
                e1.record(s)
            e1.synchronize()
            if i:
                samples.append(e0.elapsed_time(e1))
        return round(n * LOOPS / (statistics.median(samples) / 1e3) / 1e9, 3)

    out = {"tool": f"torch {torch.__version__}",
           "h2d_gbps": timed(lambda: a.copy_(host, non_blocking=True)),
           "d2h_gbps": timed(lambda: host.copy_(a, non_blocking=True)),
           "local_gbps": timed(lambda: b.copy_(a, non_blocking=True))}
    torch.cuda.empty_cache()
    return out


def ref_cupy(size_mb: int) -> dict:
    import cupy as cp

    n = size_mb << 20
    rt = cp.cuda.runtime
    host = cp.cuda.alloc_pinned_memory(n)
    a = cp.empty(n, dtype=cp.uint8)
    b = cp.empty(n, dtype=cp.uint8)
    s = cp.cuda.Stream(non_blocking=True)

    def timed(dst, src, kind) -> float:
        samples = []
        for i in range(1 + REPEATS):
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            e0.record(s)
            for _ in range(LOOPS):
                rt.memcpyAsync(dst, src, n, kind, s.ptr)
            e1.record(s)
            e1.synchronize()
            if i:
                samples.append(cp.cuda.get_elapsed_time(e0, e1))
        return round(n * LOOPS / (statistics.median(samples) / 1e3) / 1e9, 3)

    return {"tool": f"cupy {cp.__version__}",
            "h2d_gbps": timed(a.data.ptr, host.ptr, rt.memcpyHostToDevice),
            "d2h_gbps": timed(host.ptr, a.data.ptr, rt.memcpyDeviceToHost),
            "local_gbps": timed(b.data.ptr, a.data.ptr, rt.memcpyDeviceToDevice)}


def reference(size_mb: int) -> dict:
    errors = []
    for fn in (ref_torch, ref_cupy):
        try:
            return fn(size_mb)
        except Exception as e:  # a missing or broken library is reported, never fatal
            errors.append(f"{fn.__name__}: {type(e).__name__}: {e}")
    return {"error": "; ".join(errors)}


def nvidia_smi() -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        p = subprocess.run([exe, "--query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,"
                            "pcie.link.width.current", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=20)
        return p.stdout.strip() or p.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"nvidia-smi failed: {e}"


def ratio(a, b):
    return round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None


def main() -> int:
    t0 = time.time()
    result: dict = {"nvidia_smi": nvidia_smi(), "ptx": check_ptx(), "runs": []}
    print("nvidia-smi:", result["nvidia_smi"])
    print("PTX load:", json.dumps(result["ptx"]))
    if "no CUDA" in str(result["ptx"].get("error", "")):
        print("no CUDA on this machine: nothing to measure (this is the expected outcome off-GPU)")
    else:
        for size_mb in SIZES_MB:
            probe = run_probe(size_mb)
            env = probe.get("envelope") or {}
            data = env.get("data") or {}
            g = (data.get("gpus") or [{}])[0]
            ref = reference(size_mb)
            rows = []
            for label, pk, rk in (("h2d pinned", "h2d_gbps", "h2d_gbps"), ("d2h pinned", "d2h_gbps", "d2h_gbps"),
                                  ("local CE", "local_ce_gbps", "local_gbps"),
                                  ("local SM", "local_sm_gbps", "local_gbps")):
                rows.append({"what": label, "probe_gbps": g.get(pk), "ref_gbps": ref.get(rk),
                             "ratio": ratio(g.get(pk), ref.get(rk)), "verified": (g.get("verified") or {}).get(pk[:-5])})
            run = {"size_mb": size_mb, "probe_status": env.get("status"), "probe_errors": env.get("errors"),
                   "probe_error": probe.get("error"), "probe_wall_s": probe.get("wall_s"),
                   "probe_duration_s": env.get("duration_s"), "reference": ref, "rows": rows,
                   "gpu": {k: g.get(k) for k in ("name", "bus_id", "sm_count", "compute_capability")},
                   "probe_data_errors": data.get("errors"), "samples_ms": g.get("samples_ms"),
                   "guard": data.get("guard"), "driver": data.get("cuda_driver")}
            result["runs"].append(run)
            print(f"\n== {size_mb} MiB buffers, {LOOPS} copies x {REPEATS} samples; probe status "
                  f"{env.get('status')} in {probe.get('wall_s')} s wall ({env.get('duration_s')} s in-probe); "
                  f"reference {ref.get('tool', ref.get('error'))}")
            print("   busy guard:", json.dumps(data.get("guard")))
            if probe.get("error") or env.get("errors"):
                print("   probe problem:", probe.get("error") or env.get("errors"), probe.get("stderr", "")[-500:])
            print(f"   {'transfer':<12} {'probe GB/s':>11} {'ref GB/s':>10} {'ratio':>7} verified")
            for r in rows:
                print(f"   {r['what']:<12} {r['probe_gbps']!s:>11} {r['ref_gbps']!s:>10} "
                      f"{r['ratio']!s:>7} {r['verified']}")
    result["total_s"] = round(time.time() - t0, 2)
    print(f"\ntotal {result['total_s']} s")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "p2p_check.json").write_text(json.dumps(result, indent=2, default=str))
        print("wrote", Path(out) / "p2p_check.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
