"""The nccl probe on NVIDIA's real libnccl.so.2 (the `nvidia-nccl-cu12` wheel), not a compiled fake.

The wheel's library links only libc, libstdc++ and friends (CUDA's runtime is inside it; libcuda.so.1
is opened at communicator creation), so it loads on a machine without a GPU.  Here the tests hold
the probe to it: the version it reports, the result codes it names (every one the library and its
nccl.h define, each with the library's own error string), the prototypes it declares, and the
answer the whole probe gives on a host without an NVIDIA driver: `unsupported` with the reason,
in a subprocess bounded by a timeout (no crash, no hang).

scripts/test.sh installs the wheel (the `nvlibs` extra); without it the tests skip with the
install command, which CI counts as a failure.  The wheel exists for Linux x86_64 and aarch64 only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.payload import build_script, probe_source
from tests.support.skips import not_here

WHEEL = "nvidia-nccl-cu12"


def _wheel_file(suffix: str) -> Path:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        not_here(f"{WHEEL} is published for Linux x86_64 and aarch64 only")
    try:
        files = importlib.metadata.distribution(WHEEL).files or []
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{WHEEL} (NVIDIA's NCCL) is not installed: .venv/bin/pip install -e '.[nvlibs]' "
                    "(scripts/test.sh does)")
    [path] = [f for f in files if str(f).endswith(suffix)]
    return Path(str(path.locate()))


@pytest.fixture(scope="module")
def libnccl() -> Path:
    return _wheel_file("lib/libnccl.so.2")


@pytest.fixture(scope="module")
def nccl_h() -> str:
    return _wheel_file("include/nccl.h").read_text()


@pytest.fixture(scope="module")
def probe(libnccl: Path) -> Any:
    """The probe's own wrapper (_Nccl) on the real library, loaded in this process."""
    ns: dict[str, Any] = {"__name__": "fleetprobe_nccl"}
    exec(compile(probe_source("nccl"), "<nccl>", "exec"), ns)
    wrapper = ns["_Nccl"](ctypes.CDLL(str(libnccl)))
    return ns, wrapper


def _results_in_header(header: str) -> dict[int, str]:
    body = re.search(r"typedef enum \{([^}]*)\} ncclResult_t;", header)
    assert body, "nccl.h has no ncclResult_t"
    pairs = re.findall(r"(nccl\w+)\s*=\s*(\d+)", body.group(1))
    return {int(v): n for n, v in pairs if n != "ncclNumResults"}


def test_the_probe_reads_the_libraries_version(libnccl: Path, probe: Any) -> None:
    _, nccl = probe
    assert nccl.missing == [] and nccl.optional_missing == []
    code, text = nccl.version()
    wheel = importlib.metadata.version(WHEEL)
    assert text == ".".join(wheel.split(".")[:3]), (code, text, wheel)
    major, minor, patch = (int(p) for p in text.split("."))
    assert code == major * 10000 + minor * 100 + patch


def test_the_probe_names_every_result_code_nccl_defines(probe: Any, nccl_h: str) -> None:
    ns, nccl = probe
    header = _results_in_header(nccl_h)
    assert header.items() <= ns["_NCCL_RESULTS"].items()  # an older NCCL defines fewer
    # the library itself: each code has its own string; past the last, the library says it knows none
    strings = {code: nccl.lib.ncclGetErrorString(code).decode() for code in range(max(header) + 4)}
    unknown = strings[max(header) + 3]
    assert {c for c, s in strings.items() if s != unknown} == set(header)
    assert len({strings[c] for c in header}) == len(header)


@pytest.mark.parametrize("code", range(1, 9))
def test_an_nccl_error_carries_the_libraries_words(probe: Any, code: int) -> None:
    ns, nccl = probe
    err = ns["NcclError"]("ncclAllReduce", code, nccl.detail(code))
    words = nccl.lib.ncclGetErrorString(code).decode()
    assert err.name == ns["_NCCL_RESULTS"][code] and words and words in err.detail


def test_the_declared_prototypes_match_nccl_h(probe: Any, nccl_h: str) -> None:
    """As many parameters, and the pointer ones where nccl.h has pointers (ncclComm_t and
    cudaStream_t are pointers too)."""
    _, nccl = probe
    checked = 0
    for name in ns_functions(probe):
        m = re.search(rf"ncclResult_t\s+{name}\s*\(([^)]*)\)\s*;", nccl_h) or \
            re.search(rf"const char\*\s+{name}\s*\(([^)]*)\)\s*;", nccl_h)
        assert m, name
        params = [p.strip() for p in m.group(1).split(",") if p.strip() and p.strip() != "void"]
        declared = getattr(nccl.lib, name).argtypes
        assert len(declared) == len(params), (name, params, declared)
        for p, t in zip(params, declared):
            pointer = "*" in p or p.startswith(("ncclComm_t", "cudaStream_t"))
            assert pointer == (t is ctypes.c_void_p or hasattr(t, "contents")), (name, p, t)
        checked += 1
    assert checked >= 10


def ns_functions(probe: Any) -> list[str]:
    _, nccl = probe
    return sorted(n for n in dir(nccl.lib) if n.startswith("nccl") and getattr(nccl.lib, n).argtypes is not None)


def test_ops_and_types_are_nccl_hs(probe: Any, nccl_h: str) -> None:
    ns, _ = probe
    assert re.search(rf"\bncclFloat32\s*=\s*{ns['_NCCL_FLOAT32']}\b", nccl_h)
    assert re.search(rf"\bncclSum\s*=\s*{ns['_NCCL_SUM']}\b", nccl_h)


def test_without_a_gpu_the_probe_says_so(libnccl: Path, tmp_path: Path) -> None:
    """This machine has no NVIDIA driver: the probe finds the real NCCL, reads its version and answers
    `unsupported` with the reason, within seconds.  Where a driver is present the answer is a
    measurement or another stated reason, never a crash."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    script = build_script("nccl", {"nccl_lib": str(libnccl), "budget_s": 5, "hang_s": 5}, 30)
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=90, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    envelope = json.loads(proc.stdout)
    data = envelope["data"]
    assert data["library"]["version"] == ".".join(importlib.metadata.version(WHEEL).split(".")[:3])
    assert "Traceback" not in proc.stderr.decode() and list(tmp_path.iterdir()) == []
    if ctypes.util.find_library("cuda") is None:
        assert envelope["status"] == "unsupported", envelope
        [reason] = envelope["errors"]
        assert reason.startswith("no NVIDIA driver (cannot load libcuda.so.1"), reason
        assert data["gpus"] == [] and data["results"] == [] and data["hang"] is None
    else:
        assert envelope["status"] in ("ok", "partial", "unsupported"), envelope
        assert all(e["message"] for e in envelope["errors"] if isinstance(e, dict))
