"""Compile the fake `libcuda.so.1` for one fixture machine (machines/<name>.cuda.yaml).

The fixture is turned into a C header of constants and matrices and compiled with gcc together
with fake_cuda.c.  Builds are cached by a hash of the source and the resolved fixture, so a test
session compiles each machine once.  A fixture may name a `base` machine and override parts of
it (mappings merge key by key, lists replace), which keeps each fault fixture to its fault.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from orchestrator.simulate.cbuild import BuildError, build_shared_library

HERE = Path(__file__).resolve().parent
MACHINES = HERE / "machines"
SOURCE = HERE / "fake_cuda.c"


class FixtureError(ValueError):
    pass


def machines() -> list[str]:
    """Names of every CUDA fixture machine shipped."""
    return sorted(p.name[: -len(".cuda.yaml")] for p in MACHINES.glob("*.cuda.yaml"))


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_fixture(machine: str, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    path = MACHINES / f"{machine}.cuda.yaml"
    if not path.is_file():
        raise FixtureError(f"no CUDA fixture {machine!r}; known: {', '.join(machines())}")
    if machine in _seen:
        raise FixtureError(f"fixture {machine!r} inherits from itself via {' -> '.join(_seen)}")
    raw = yaml.safe_load(path.read_text()) or {}
    if not isinstance(raw, dict):
        raise FixtureError(f"{path.name}: top level must be a mapping")
    base = raw.pop("base", None)
    if base:
        raw = _merge(load_fixture(str(base), (*_seen, machine)), raw)
    raw["machine"] = machine
    return raw


def _pair_table(fx: dict[str, Any], n: int) -> list[list[dict[str, Any]]]:
    """Per ordered pair: the class's figures, then the pair's own overrides."""
    classes = fx.get("classes") or {}
    default = fx.get("default_class")
    table: list[list[dict[str, Any]]] = []
    for _ in range(n):
        table.append([dict(classes.get(default, {})) if default else {} for _ in range(n)])
    for a, b, cls in fx.get("pair_class") or []:
        if cls not in classes:
            raise FixtureError(f"{fx['machine']}: pair_class names unknown class {cls!r}")
        table[a][b] = dict(classes[cls])
        table[b][a] = dict(classes[cls])
    for o in fx.get("pair_overrides") or []:
        src, dst = int(o["src"]), int(o["dst"])
        table[src][dst].update({k: v for k, v in o.items() if k not in ("src", "dst")})
    return table


def _c_str(s: str) -> str:
    return json.dumps(str(s))  # a JSON string literal is a valid C string literal for ASCII


def _matrix(name: str, rows: list[list[Any]], ctype: str, nmax: int) -> str:
    body = ",\n  ".join("{" + ", ".join(str(v) for v in row) + "}" for row in rows) or "{0}"
    return f"static const {ctype} {name}[{nmax}][{nmax}] = {{\n  {body}\n}};\n"


def _vector(name: str, values: list[Any], ctype: str, nmax: int) -> str:
    return f"static const {ctype} {name}[{nmax}] = {{{', '.join(str(v) for v in values) or '0'}}};\n"


def fixture_header(fx: dict[str, Any]) -> str:
    gpu = fx.get("gpu") or {}
    bus_ids = [str(b).lower() for b in fx.get("bus_ids") or []]
    per_gpu = fx.get("gpu_overrides") or {}
    n = len(bus_ids)
    nmax = max(n, 1)

    def g(i: int, key: str, default: Any) -> Any:
        return (per_gpu.get(i) or {}).get(key, gpu.get(key, default))

    pairs = _pair_table(fx, n)

    def pm(key: str, default: Any, cast: Any = float) -> list[list[Any]]:
        return [[cast(pairs[a][b].get(key, default)) if a != b else cast(default) for b in range(n)]
                for a in range(n)]

    faults = fx.get("faults") or {}
    host = fx.get("host") or {}
    corrupt = [[0] * n for _ in range(n)]
    for a, b in faults.get("corrupt") or []:
        corrupt[a][b] = 1
    busy = [1 if i in (faults.get("busy") or []) else 0 for i in range(n)]
    cc = str(gpu.get("cc", "9.0")).split(".")
    names = ", ".join(_c_str(g(i, "name", "NVIDIA Fake GPU")) for i in range(n)) or '""'
    buses = ", ".join(_c_str(b) for b in bus_ids) or '""'
    out = [
        f"#define FX_MACHINE {_c_str(fx['machine'])}\n",
        f"#define FX_NDEV {n}\n#define FX_NMAX {nmax}\n",
        f"#define FX_DRIVER_VERSION {int(fx.get('driver_version', 12080))}\n",
        f"#define FX_PTX_MAX {int(fx.get('ptx_max_version', 88))}\n",
        f"#define FX_INIT_ERROR {int(faults.get('init_error', 0))}\n",
        f"#define FX_OOM_GPU {int(faults.get('oom_gpu', -1))}\n",
        f"#define FX_FAIL_GPU {int((faults.get('fail_gpu') or {}).get('gpu', -1))}\n",
        f"#define FX_FAIL_CODE {int((faults.get('fail_gpu') or {}).get('error', 999))}\n",
        f"#define FX_LAUNCH_FAILURE {1 if faults.get('launch_failure') else 0}\n",
        f"#define FX_MAX_PEERS {int(fx.get('max_peers', 0))}\n",
        # NVML's MIG mode (-1: the GPU has no MIG) and virtualization mode (0 none, 1 pass-through, 2 vGPU)
        f"#define FX_MIG {int(fx.get('mig', -1))}\n",
        f"#define FX_VIRT_MODE {int(fx.get('virtualization_mode', 0))}\n",
        f"#define FX_MEM_BYTES {int(float(gpu.get('memory_gib', 80)) * (1 << 30))}LL\n",
        f"#define FX_CLOCK_KHZ {int(gpu.get('clock_mhz', 1980)) * 1000}\n",
        f"#define FX_CC_MAJOR {int(cc[0])}\n#define FX_CC_MINOR {int(cc[1]) if len(cc) > 1 else 0}\n",
        f"#define FX_HOST_AGG {float(host.get('aggregate_gbps') or 0.0)}\n",
        f"#define FX_HOST_LAT_US {float(host.get('latency_us', 2.0))}\n",
        f"#define FX_STAGED_GBPS {float(host.get('staged_gbps', 20.0))}\n",
        f"#define FX_STAGED_BIDIR {float(host.get('staged_bidir_gbps', 2 * float(host.get('staged_gbps', 20.0))))}\n",
        f"#define FX_STAGED_LAT_US {float(host.get('staged_latency_us', 15.0))}\n",
        f"static const char *FX_NAME[{nmax}] = {{{names}}};\n",
        f"static const char *FX_BUS[{nmax}] = {{{buses}}};\n",
        _vector("FX_SM_COUNT", [int(g(i, "sm_count", 108)) for i in range(n)], "int", nmax),
        _vector("FX_DMABUF", [1 if g(i, "dmabuf", True) else 0 for i in range(n)], "int", nmax),
        _vector("FX_H2D", [float(g(i, "h2d_gbps", 25.0)) for i in range(n)], "double", nmax),
        _vector("FX_D2H", [float(g(i, "d2h_gbps", 25.0)) for i in range(n)], "double", nmax),
        _vector("FX_LOCAL_CE", [float(g(i, "local_ce_gbps", 1000.0)) for i in range(n)], "double", nmax),
        _vector("FX_LOCAL_SM", [float(g(i, "local_sm_gbps", 1000.0)) for i in range(n)], "double", nmax),
        _vector("FX_BUSY", busy, "int", nmax),
        # NVML's readings while the p2p probe loads the GPU (its SM clock, power, temperature)
        _vector("FX_LOAD_CLOCK", [int(g(i, "load_sm_clock_mhz", gpu.get("clock_mhz", 1980))) for i in range(n)],
                "unsigned int", nmax),
        _vector("FX_LOAD_POWER_MW", [int(float(g(i, "load_power_w", 400.0)) * 1000) for i in range(n)],
                "unsigned int", nmax),
        _vector("FX_LOAD_TEMP", [int(g(i, "load_temperature_c", 55)) for i in range(n)], "unsigned int", nmax),
        _matrix("FX_PEER", pm("peer", 0, lambda v: 1 if v else 0), "int", nmax),
        _matrix("FX_NVLINK", pm("nvlink", 0, lambda v: 1 if v else 0), "int", nmax),
        _matrix("FX_RANK", pm("rank", 0, int), "int", nmax),
        _matrix("FX_CE_GBPS", pm("ce_gbps", 1.0), "double", nmax),
        _matrix("FX_SM_GBPS", pm("sm_gbps", 1.0), "double", nmax),
        _matrix("FX_BIDIR_GBPS", pm("bidir_gbps", 2.0), "double", nmax),
        _matrix("FX_LAT_US", pm("latency_us", 3.0), "double", nmax),
        _matrix("FX_CORRUPT", corrupt, "int", nmax),
    ]
    # A pair without a ce figure of its own copies at the class's figure; unit-less 1.0 only
    # reaches the diagonal, which the fake never uses for peer copies.
    return "".join(out)


def build_fake_cuda(machine: str, dest_dir: Path) -> Path:
    """Compile (once, cached by content) the fake libcuda.so.1 for `machine`; return its path."""
    fx = load_fixture(machine)
    header = fixture_header(fx)
    flags = ["-std=gnu11", "-O0", "-Wall", "-Wextra", "-Wno-unused-parameter", '-DFAKE_CUDA_FIXTURE="fixture.h"']
    try:
        return build_shared_library(SOURCE, "fixture.h", header, "libcuda.so.1", Path(dest_dir),
                                    f"fake-cuda-{machine}", flags)
    except BuildError as e:
        raise FixtureError(str(e)) from None
