"""Compile the fake `libnccl.so.2` for one fixture machine (the `nccl` mapping of machines/<name>.cuda.yaml).

The fake runs on top of the same machine's fake libcuda.so.1 (fake_cuda.py): it finds it by soname,
asks it for peer access (the transport NCCL picks) and drives its stream clocks.  The mapping:

    nccl:
      version: "2.19.3"        # what ncclGetVersion answers; older versions lack newer symbols
      busbw_gbps: 480.0        # bus bandwidth of large all_reduce messages on the fixture's transport
      transport: NVLS          # NVLS | P2P | SHM | NET when P2P works (P2P off: SHM, SHM off too: NET)
      channels: 16
      nvls_channels: 16
      p2p_busbw_gbps: 360.0    # NVLS disabled (NCCL_NVLS_ENABLE=0): ring over P2P
      shm_busbw_gbps: 20.0     # P2P off: through host shared memory (default: the staged copy rate)
      net_busbw_gbps: 5.0
      latency_us: 12.0
      half_bytes: 4194304      # message size that reaches half the bandwidth (small ones do not fill links)
      host_env: {NCCL_P2P_DISABLE: "1"}   # the host's environment (record.py; the library ignores it)
      faults: {wrong_rank: 3, error: {call: init|all_reduce|group_end, code: 2},
               hang: true, async_error: 6, hang_after: 2, stdout: true}

Builds are cached by content like the other fakes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from orchestrator.simulate.cbuild import BuildError, build_shared_library
from orchestrator.simulate.fake_cuda import FixtureError, load_fixture

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "fake_nccl.c"
TRANSPORTS = ("P2P", "SHM", "NET", "NVLS")
ERROR_CALLS = {"init": 1, "all_reduce": 2, "group_end": 3}


def has_nccl(machine: str) -> bool:
    """Whether the machine's fixture installs NCCL (a `nccl` mapping)."""
    return isinstance(load_fixture(machine).get("nccl"), dict)


def version_code(version: str) -> tuple[int, int]:
    """(what ncclGetVersion answers, major*10000+minor*100+patch): NCCL_VERSION_CODE changed its
    encoding in 2.9 (2.8.4 -> 2804, 2.9.6 -> 20906)."""
    parts = [int(p) for p in str(version).split(".")]
    major, minor, patch = [*parts, 0, 0, 0][:3]
    num = major * 10000 + minor * 100 + patch
    code = num if (major, minor) >= (2, 9) else major * 1000 + minor * 100 + patch
    return code, num


def fixture_header(fx: dict[str, Any]) -> str:
    nc = fx.get("nccl")
    if not isinstance(nc, dict):
        raise FixtureError(f"{fx['machine']}: the fixture installs no NCCL (no `nccl` mapping)")
    version = str(nc.get("version", "2.19.3"))
    code, num = version_code(version)
    transport = str(nc.get("transport", "P2P")).upper()
    if transport not in TRANSPORTS:
        raise FixtureError(f"{fx['machine']}: nccl.transport must be one of {', '.join(TRANSPORTS)}")
    host = fx.get("host") or {}
    faults = nc.get("faults") or {}
    err = faults.get("error") or {}
    call = err.get("call")
    if call is not None and call not in ERROR_CALLS:
        raise FixtureError(f"{fx['machine']}: nccl.faults.error.call must be one of {', '.join(ERROR_CALLS)}")
    busbw = float(nc.get("busbw_gbps", 100.0))
    channels = int(nc.get("channels", 8))
    out = [
        f"#define FXN_MACHINE {json.dumps(fx['machine'])}\n",
        f"#define FXN_VERSION {code}\n#define FXN_VNUM {num}\n",
        f"#define FXN_VERSION_STR {json.dumps(version)}\n",
        f"#define FXN_TRANSPORT {TRANSPORTS.index(transport)}\n",
        f"#define FXN_BUSBW {busbw}\n",
        f"#define FXN_P2P_BUSBW {float(nc.get('p2p_busbw_gbps', busbw))}\n",
        f"#define FXN_SHM_BUSBW {float(nc.get('shm_busbw_gbps', host.get('staged_gbps', 20.0)))}\n",
        f"#define FXN_NET_BUSBW {float(nc.get('net_busbw_gbps', 5.0))}\n",
        f"#define FXN_CHANNELS {channels}\n",
        f"#define FXN_NVLS_CHANNELS {int(nc.get('nvls_channels', channels))}\n",
        f"#define FXN_SHM_CHANNELS {int(nc.get('shm_channels', 2))}\n",
        f"#define FXN_LAT_US {float(nc.get('latency_us', 10.0))}\n",
        f"#define FXN_HALF_BYTES {float(nc.get('half_bytes', 4 << 20))}\n",
        f"#define FXN_WRONG_RANK {int(faults.get('wrong_rank', -1))}\n",
        f"#define FXN_ERROR_CALL {ERROR_CALLS[str(call)] if call else 0}\n",
        f"#define FXN_ERROR_CODE {int(err.get('code', 2))}\n",
        f"#define FXN_HANG {1 if faults.get('hang') else 0}\n",
        f"#define FXN_ASYNC_ERROR {int(faults.get('async_error', 0))}\n",
        f"#define FXN_HANG_AFTER {int(faults.get('hang_after', 0))}\n",
        f"#define FXN_STDOUT {1 if faults.get('stdout') else 0}\n",
    ]
    return "".join(out)


def host_env(machine: str) -> dict[str, str]:
    """The NCCL_* environment the machine's host sets for its users (the demo's stale settings)."""
    nc = load_fixture(machine).get("nccl") or {}
    return {str(k): str(v) for k, v in (nc.get("host_env") or {}).items()}


def build_fake_nccl(machine: str, dest_dir: Path) -> Path:
    """Compile (once, cached by content) the fake libnccl.so.2 for `machine`; return its path."""
    # the simulated fabric's shared reader (fake_fabric.h) is part of what the build depends on
    shared = (HERE / "fake_fabric.h").read_text()
    header = fixture_header(load_fixture(machine)) + f"/* fake_fabric.h {hashlib.sha256(shared.encode()).hexdigest()[:16]} */\n"
    flags = ["-std=gnu11", "-O0", "-Wall", "-Wextra", "-Wno-unused-parameter", '-DFAKE_NCCL_FIXTURE="fixture.h"']
    try:
        return build_shared_library(SOURCE, "fixture.h", header, "libnccl.so.2", Path(dest_dir),
                                    f"fake-nccl-{machine}", [*flags, "-ldl"])
    except BuildError as e:
        raise FixtureError(str(e)) from None
