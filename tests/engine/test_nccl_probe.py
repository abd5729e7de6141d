"""The nccl probe run for real against the compiled fake libnccl.so.2 on the fake libcuda.

The probe runs as on a host: `python3 -` fed by build_script, in a subprocess.  Both fakes write
their accounting after every change ($FAKE_CUDA_REPORT, $FAKE_NCCL_REPORT), so every path is
checked for leftover contexts, streams, events, device memory and communicators.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.payload import build_script
from orchestrator.simulate.fake_cuda import build_fake_cuda
from orchestrator.simulate.fake_nccl import build_fake_nccl, version_code

SMALL = {"min_bytes": 1 << 16, "max_bytes": 1 << 20, "step_factor": 4, "iters": 3, "hang_s": 1.5}


@pytest.fixture(scope="module")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fake-nccl")


def run_probe(libdir: Path, machine: str, env: dict[str, str] | None = None, nccl: bool = True,
              deadline: float = 60.0, **args: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None, bytes]:
    """(envelope, fake libcuda accounting, fake NCCL accounting or None, raw stdout)."""
    cuda = build_fake_cuda(machine, libdir)
    reports = libdir / f"reports-{machine}-{time.monotonic_ns()}"
    reports.mkdir()
    full: dict[str, Any] = dict(SMALL, lib=str(cuda), nvml_lib=str(cuda))
    if nccl:
        full["nccl_lib"] = str(build_fake_nccl(machine, libdir))
    full.update(args)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    run_env = dict(clean, FAKE_CUDA_REPORT=str(reports / "cuda.json"), FAKE_NCCL_REPORT=str(reports / "nccl.json"))
    run_env.update(env or {})
    proc = subprocess.run([sys.executable, "-"], input=build_script("nccl", full, deadline), capture_output=True,
                          timeout=120, env=run_env)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    envelope = json.loads(proc.stdout)
    cuda_acct = json.loads((reports / "cuda.json").read_text()) if (reports / "cuda.json").exists() else {}
    nccl_acct = json.loads((reports / "nccl.json").read_text()) if (reports / "nccl.json").exists() else None
    return envelope, cuda_acct, nccl_acct, proc.stdout


def assert_nothing_held(cuda: dict[str, Any], nccl: dict[str, Any] | None) -> None:
    held = {k: cuda.get(k, 0) for k in ("device_allocs", "device_bytes", "host_allocs", "streams", "events",
                                         "retained_contexts")}
    assert held == dict.fromkeys(held, 0), cuda
    if nccl is not None:
        assert nccl["comms"] == 0 and nccl["internal_allocs"] == 0, nccl


# ------------------------------------------------------------------------------- the fake itself


def test_fake_exports_nccl_symbols_and_old_versions_lack_the_newer_ones(libdir: Path) -> None:
    new = ctypes.CDLL(str(build_fake_nccl("dgx-h100--nccl", libdir)))
    for sym in ("ncclGetVersion", "ncclCommInitAll", "ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                "ncclGroupStart", "ncclGroupEnd", "ncclCommDestroy", "ncclCommAbort", "ncclCommGetAsyncError",
                "ncclGetErrorString", "ncclGetLastError", "ncclCommFinalize", "ncclCommCount"):
        assert hasattr(new, sym), sym
    old = ctypes.CDLL(str(build_fake_nccl("dgx-h100--nccl-old", libdir)))
    assert hasattr(old, "ncclAllReduce") and hasattr(old, "ncclCommInitAll")
    for sym in ("ncclCommAbort", "ncclCommGetAsyncError", "ncclGetLastError", "ncclCommFinalize"):
        assert not hasattr(old, sym), sym
    v = ctypes.c_int()
    assert old.ncclGetVersion(ctypes.byref(v)) == 0 and v.value == 2307  # the pre-2.9 encoding
    assert new.ncclGetVersion(ctypes.byref(v)) == 0 and v.value == 22105
    new.ncclGetErrorString.restype = ctypes.c_char_p
    assert new.ncclGetErrorString(6) == b"remote process exited or there was a network error"
    assert version_code("2.8.4") == (2804, 20804) and version_code("2.19.3") == (21903, 21903)


# ------------------------------------------------------------------------------- probe control flow


def test_healthy_nvswitch_all_reduce_is_timed_verified_and_cleaned_up(libdir: Path) -> None:
    env, cuda, nccl, stdout = run_probe(libdir, "dgx-h100--nccl")
    assert env["status"] == "ok", env["errors"]
    d = env["data"]
    assert stdout.count(b"\n") == 1  # the envelope and nothing else
    assert d["library"]["version"] == "2.21.5" and d["library"]["missing_symbols"] == []
    assert d["complete"] and d["hang"] is None and d["errors"] == []
    assert [r["size_bytes"] for r in d["results"]] == [1 << 16, 1 << 18, 1 << 20]
    n = len(d["selected"])
    assert n == 8
    for r in d["results"]:
        assert r["wrong"] == 0 and r["op"] == "all_reduce" and r["dtype"] == "float" and not r["in_place"]
        assert r["count"] == r["size_bytes"] // 4
        # nccl-tests' arithmetic: algbw = bytes / time, busbw = algbw x 2(n-1)/n
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_us"] * 1e-6) / 1e9, rel=1e-3)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (n - 1) / n, rel=1e-3)
    assert any("nvls channels" in line for line in d["debug_lines"])
    assert d["env"]["kept"] is False and d["env"]["applied"]["NCCL_DEBUG"] == "INFO"
    # NCCL's log went into a pipe and the conf file is /dev/null: nothing was written on the host
    assert d["env"]["applied"]["NCCL_DEBUG_FILE"] == "<pipe>" and d["env"]["applied"]["NCCL_CONF_FILE"] == os.devnull
    assert_nothing_held(cuda, nccl)
    assert nccl is not None and nccl["destroyed"] == 8


def test_wrong_data_is_counted_per_element(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-wrong")
    assert all(r["wrong"] == 1 for r in env["data"]["results"])  # one element of rank 3's result
    assert_nothing_held(cuda, nccl)


def test_init_error_is_named_and_nothing_is_left(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-error")
    d = env["data"]
    assert d["results"] == [] and not d["complete"]
    [err] = d["errors"]
    assert err["error"] == "ncclSystemError" and "injected init failure" in err["message"]
    assert_nothing_held(cuda, nccl)


def test_hang_is_polled_aborted_and_freed_within_its_deadline(libdir: Path) -> None:
    t0 = time.monotonic()
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-hang")
    assert time.monotonic() - t0 < 30  # never blocked in a synchronise
    d = env["data"]
    assert d["hang"] == {"op": "all_reduce", "size_bytes": 1 << 16, "after_s": 1.5}
    assert d["not_reached"] == [1 << 18, 1 << 20] and not d["complete"]
    assert nccl is not None and nccl["aborted"] == 8 and nccl["destroyed"] == 0
    assert_nothing_held(cuda, nccl)


def test_async_error_aborts_the_communicators(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-async")
    [err] = env["data"]["errors"]
    assert err["error"] == "ncclRemoteError" and "Connection closed" in err["message"]
    assert nccl is not None and nccl["aborted"] == 8
    assert_nothing_held(cuda, nccl)


def test_old_nccl_without_abort_leaves_a_hang_to_the_process_exit(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-old-hang")
    d = env["data"]
    assert d["library"]["version_code"] == 2307 and d["library"]["version"] == "2.3.7"
    assert set(d["library"]["missing_symbols"]) == {"ncclCommAbort", "ncclCommGetAsyncError", "ncclGetLastError"}
    assert d["hang"] is not None
    assert any("lacks ncclCommAbort" in e["message"] for e in d["errors"])
    # buffers under a kernel that may still run are not freed; the process exit does it
    assert cuda["device_allocs"] > 0 and nccl is not None and nccl["comms"] == 8


def test_nccl_chatter_on_stdout_never_reaches_the_envelope(libdir: Path) -> None:
    env, cuda, nccl, stdout = run_probe(libdir, "dgx-h100--nccl-stdout")
    # one line, the envelope: the chatter is only inside it, as the data the probe captured
    assert stdout.count(b"\n") == 1 and stdout.startswith(b"{") and b"\n[fake-plugin]" not in stdout
    d = env["data"]
    assert d["stdout_bytes"] > 0 and "fake-plugin" in d["stdout_head"]
    assert_nothing_held(cuda, nccl)


def test_inherited_settings_are_recorded_and_neutralised(libdir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "site.conf"
    conf.write_text("# site\nNCCL_NVLS_ENABLE=0\n")
    host_env = {"NCCL_P2P_DISABLE": "1", "NCCL_CONF_FILE": str(conf)}
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl", env=host_env)
    d = env["data"]
    assert d["env"]["inherited"] == host_env
    assert d["env"]["files"] == {str(conf): {"NCCL_NVLS_ENABLE": "0"}}
    assert d["env"]["applied"]["NCCL_P2P_DISABLE"] is None and d["env"]["applied"]["NCCL_NVLS_ENABLE"] == ""
    assert not any("set by environment" in line for line in d["debug_lines"])
    assert any("nvls channels" in line and "16 nvls" in line for line in d["debug_lines"])  # measured as shipped
    assert_nothing_held(cuda, nccl)
    kept, _, _, _ = run_probe(libdir, "dgx-h100--nccl", env=host_env, keep_env=True)
    lines = kept["data"]["debug_lines"]
    assert kept["data"]["env"]["kept"] is True
    assert any("NCCL_P2P_DISABLE set by environment to 1" in line for line in lines)
    assert any("via SHM" in line for line in lines)


def test_p2p_off_falls_back_to_shm(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-shm")
    assert any("via SHM/direct/direct" in line for line in env["data"]["debug_lines"])
    assert all(r["wrong"] == 0 for r in env["data"]["results"])
    assert_nothing_held(cuda, nccl)


def test_absent_library_is_unsupported_saying_where_it_looked(libdir: Path, tmp_path: Path) -> None:
    env, _, _, _ = run_probe(libdir, "dgx-h100--nccl", nccl=False, root=str(tmp_path))
    assert env["status"] == "unsupported"
    [why] = env["errors"]
    assert why.startswith("libnccl.so.2 not found")
    assert "/nvidia/nccl/lib/libnccl.so.2" in why and "/torch/lib/libnccl.so.2" in why
    assert str(tmp_path) + "/usr/lib/x86_64-linux-gnu/libnccl.so.2" in why


def test_library_is_found_in_a_pip_wheel_under_root(libdir: Path, tmp_path: Path) -> None:
    site = tmp_path / "usr/local/lib/python3.10/dist-packages/nvidia/nccl/lib"
    site.mkdir(parents=True)
    (site / "libnccl.so.2").write_bytes(build_fake_nccl("dgx-h100--nccl", libdir).read_bytes())
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl", nccl=False, root=str(tmp_path))
    assert env["status"] == "ok", env["errors"]
    assert env["data"]["library"]["found_by"] == "pip nvidia-nccl-cu*"
    assert env["data"]["library"]["path"] == str(site / "libnccl.so.2")
    assert_nothing_held(cuda, nccl)


def test_one_gpu_has_no_bus_traffic(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl", gpus=["0000:2a:00.0"])
    d = env["data"]
    assert d["selected"] == [1]
    assert all(r["busbw_gbps"] == 0.0 and r["wrong"] == 0 for r in d["results"])  # 2(n-1)/n = 0
    assert_nothing_held(cuda, nccl)


def test_busy_gpus_are_left_alone_and_mig_is_a_limitation(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl-busy")
    d = env["data"]
    assert d["selected"] == [2, 3, 4, 5, 6, 7] and d["guard"]["busy"] == {"0": 1, "1": 1}
    from orchestrator.facts.normalize.nccl import normalize

    assert normalize(d)["busy_gpus"] == ["0000:18:00.0", "0000:2a:00.0"]
    assert_nothing_held(cuda, nccl)
    mig, _, _, _ = run_probe(libdir, "dgx-h100--nccl-mig")
    assert mig["data"]["limitation"].startswith("MIG is enabled") and mig["data"]["results"] == []


def test_budget_bounds_the_sweep(libdir: Path) -> None:
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl", budget_s=0)
    d = env["data"]
    assert d["budget_exhausted"] and d["results"] == [] and d["not_reached"] == [1 << 16, 1 << 18, 1 << 20]
    assert_nothing_held(cuda, nccl)


def test_bad_arguments_are_unsupported(libdir: Path) -> None:
    env, _, _, _ = run_probe(libdir, "dgx-h100--nccl", min_bytes=8, max_bytes=4)
    assert env["status"] == "unsupported" and "min_bytes" in env["errors"][0]


def test_all_gather_and_reduce_scatter_are_timed_and_verified_too(libdir: Path) -> None:
    ops = ["all_reduce", "all_gather", "reduce_scatter"]
    env, cuda, nccl, _ = run_probe(libdir, "dgx-h100--nccl", ops=ops, gpus=[0, 1, 2, 3, 4, 5])
    rows = env["data"]["results"]
    n = 6
    # sizes are whole 4 KiB pattern periods per rank for the segmented operations
    assert {r["op"] for r in rows} == set(ops)
    for r in rows:
        assert r["wrong"] == 0, r
        factor = 2 * (n - 1) / n if r["op"] == "all_reduce" else (n - 1) / n
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * factor, rel=1e-3)
        if r["op"] != "all_reduce":
            assert r["size_bytes"] % (n * 4096) == 0
    assert_nothing_held(cuda, nccl)
    bad, _, _, _ = run_probe(libdir, "dgx-h100--nccl-wrong", ops=["all_gather", "reduce_scatter"])
    assert all(r["wrong"] == 1 for r in bad["data"]["results"])  # rank 3's one wrong element, per op


# Each process runs `python3 -` under a parent that reports its child's peak RSS (KiB) on stderr:
# the probe leaves with os._exit, so it cannot measure itself.
_PEAK = ("import resource, subprocess, sys; p = subprocess.run([sys.executable, '-'], stdin=sys.stdin); "
         "sys.stderr.write('PEAK_KIB %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
         "sys.exit(p.returncode)")


def _ring_member(cuda: str, nccl: str, nranks: int, index: int, uid: str | None) -> subprocess.Popen[bytes]:
    args = dict(SMALL, lib=cuda, nvml_lib=cuda, nccl_lib=nccl, min_bytes=1 << 20, max_bytes=1 << 20, iters=1,
                ops=["all_gather"], comm={"nranks": nranks, "first_rank": 8 * index, "id": uid, "group": "g"})
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    p = subprocess.Popen([sys.executable, "-c", _PEAK], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdin is not None
    p.stdin.write(build_script("nccl", args, 60.0, announce=True))
    p.stdin.close()
    return p


@pytest.mark.parametrize("processes", [3, 4])
def test_all_gather_verification_memory_does_not_grow_with_the_ranks(libdir: Path, processes: int) -> None:
    # a ring across hosts (8 GPUs each, on this host's loopback): all_gather's read-back once held
    # every rank's 4 MiB expected chunk at once (nranks x 4 MiB per process: 1.7 GB at the demo's
    # 208 ranks, OOM-killed mid-step); now one rank's pattern at a time, no longer than its segment
    cuda, nccl = str(build_fake_cuda("dgx-h100--nccl", libdir)), str(build_fake_nccl("dgx-h100--nccl", libdir))
    nranks = 8 * processes
    lead = _ring_member(cuda, nccl, nranks, 0, None)
    assert lead.stdout is not None
    said = lead.stdout.readline() + lead.stdout.readline()  # the start mark, then the ncclUniqueId
    uid = json.loads(said.split(b"FPSAY ", 1)[1])["nccl_id"]
    procs = [lead, *(_ring_member(cuda, nccl, nranks, i, uid) for i in range(1, processes))]
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        out, err = p.stdout.read(), p.stderr.read()  # small: NCCL's log goes to the probe's own pipe
        p.wait(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
        env = json.loads(out.splitlines()[-1])
        assert env["status"] == "ok" and [(r["op"], r["wrong"]) for r in env["data"]["results"]] == [("all_gather", 0)]
        peak = int(err.decode().rsplit("PEAK_KIB ", 1)[1].split()[0]) * 1024
        assert peak < nranks * (4 << 20), f"peak RSS {peak >> 20} MiB for {nranks} ranks"
