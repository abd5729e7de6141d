"""The p2p probe run for real against the compiled fake libcuda, then judged and rendered.

Each fixture machine's fake is compiled once per session; the probe runs as it does on a host:
`python3 -` fed by build_script, in a subprocess.  The fake writes its allocation counts to
$FAKE_CUDA_REPORT after every change, so GPU memory accounting is asserted on every path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.engine.payload import build_script  # noqa: E402
from orchestrator.facts.normalize.p2p import normalize  # noqa: E402
from orchestrator.present.terminal.bandwidth import render  # noqa: E402
from orchestrator.simulate.fake_cuda import FixtureError, build_fake_cuda, load_fixture, machines  # noqa: E402
from orchestrator.verdict.checks import p2p as checks  # noqa: E402
from orchestrator.verdict.checks.base import HostView  # noqa: E402
from orchestrator.verdict.expectations import Expectations  # noqa: E402

# load_s: the load unit still runs on every GPU and NVML is still sampled half-way through it, for a
# twentieth of a second instead of the probe's 0.3 s (each GPU's 0.3 s was most of this file's time)
SMALL = {"size_mb": 2, "repeats": 1, "loops": 2, "latency_loops": 4, "load_s": 0.05}
HEALTHY = ("dgx-h100", "dgx-a100", "ws-4xa6000")


@pytest.fixture(scope="session")
def libdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fake-cuda")


_RUNS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}


def run_probe(libdir: Path, machine: str, nvml: bool = True, deadline: float = 60.0,
              **args: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(envelope, the fake's final accounting or None when it never initialised)."""
    key = json.dumps([machine, nvml, deadline, args], sort_keys=True)
    if key in _RUNS:
        return _RUNS[key]
    lib = build_fake_cuda(machine, libdir)
    report = libdir / f"report-{abs(hash(key))}.json"
    report.unlink(missing_ok=True)
    full = dict(SMALL, lib=str(lib), nvml_lib=str(lib) if nvml else str(libdir / "no-libnvidia-ml.so.1"))
    full.update(args)
    proc = subprocess.run([sys.executable, "-"], input=build_script("p2p", full, deadline),
                          capture_output=True, timeout=120, env=dict(os.environ, FAKE_CUDA_REPORT=str(report)))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    env = json.loads(proc.stdout)
    acct = json.loads(report.read_text()) if report.exists() else None
    _RUNS[key] = (env, acct)
    return env, acct


def assert_nothing_held(acct: dict[str, Any] | None) -> None:
    if acct is None:
        return
    held = {k: acct[k] for k in ("device_allocs", "device_bytes", "host_allocs", "streams", "events", "modules",
                                 "retained_contexts")}
    assert held == dict.fromkeys(held, 0), acct


def judge(env: dict[str, Any], facts: dict[str, Any] | None = None, expect: Expectations | None = None,
          outcome: str = "ok") -> list[Any]:
    all_facts = dict(facts or {})
    all_facts["p2p"] = normalize(env["data"])
    view = HostView(name="h1", facts=all_facts, outcomes={"p2p": outcome}, expect=expect or Expectations())
    return [f for check in checks.CHECKS for f in check(view)]


# ------------------------------------------------------------------------------- the fake itself


def test_fixture_machines_use_the_shared_names_and_bus_ids() -> None:
    names = set(machines())
    assert {"dgx-h100", "dgx-a100", "consumer-8x4090", "ws-4xa6000", "dgx-a100--p2p-disabled",
            "dgx-h100--p2p-slow", "dgx-h100--uplink-contention", "dgx-h100--copy-corrupt",
            "dgx-h100--oom"} <= names
    assert load_fixture("dgx-h100--p2p-slow")["bus_ids"][2] == "0000:3a:00.0"  # inherited from the base
    assert load_fixture("ws-4xa6000")["bus_ids"] == ["0000:17:00.0", "0000:65:00.0", "0000:b3:00.0", "0000:ca:00.0"]
    with pytest.raises(FixtureError, match="no CUDA fixture"):
        load_fixture("no-such-machine")


def test_fake_exports_the_versioned_driver_symbols(libdir: Path) -> None:
    import ctypes

    lib = ctypes.CDLL(str(build_fake_cuda("dgx-h100", libdir)))
    for sym in ("cuMemAlloc_v2", "cuMemFree_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
                "cuMemcpyDtoDAsync_v2", "cuStreamDestroy_v2", "cuEventDestroy_v2", "cuDevicePrimaryCtxRelease_v2",
                "cuEventElapsedTime_v2", "cuMemHostGetDevicePointer_v2", "cuDeviceTotalMem_v2", "cuMemcpyPeerAsync",
                "cuModuleLoadDataEx", "cuLaunchKernel"):
        assert hasattr(lib, sym), sym


# ------------------------------------------------------------------------------- probe control flow


@pytest.mark.parametrize("machine", (*HEALTHY, "consumer-8x4090"))
def test_healthy_machine_is_measured_fully_and_verified(libdir: Path, machine: str) -> None:
    env, acct = run_probe(libdir, machine)
    assert env["status"] == "ok", env["errors"]
    data = env["data"]
    fx = load_fixture(machine)
    n = len(fx["bus_ids"])
    assert [g["bus_id"] for g in data["gpus"]] == fx["bus_ids"]  # upper-case from the driver, normalised
    assert data["complete"] and not data["budget_exhausted"] and not data["not_reached"]
    assert len(data["pairs"]) == n * (n - 1)
    assert len(data["bidirectional"]) == n * (n - 1) // 2
    for g in data["gpus"]:
        assert set(g["verified"]) == {"h2d", "d2h", "local_ce", "local_sm"} and all(g["verified"].values())
        # the probe's GB/s arithmetic (bytes x loops / event time) against the fixture's figure
        assert g["h2d_gbps"] == pytest.approx(fx["gpu"]["h2d_gbps"], rel=1e-3)
        assert g["d2h_gbps"] == pytest.approx(fx["gpu"]["d2h_gbps"], rel=1e-3)
    for p in data["pairs"]:
        assert all(p["verified"].values())
        assert p["peer_enabled"] == bool(data["can_access_peer"][p["src"]][p["dst"]])
        assert (p["sm_read_gbps"] is None) == (not p["peer_enabled"])  # no kernel on a peer it cannot reach
    assert data["all_to_host"]["verified"] == {"d2h": True, "h2d": True}
    assert data["guard"]["ran"] and data["guard"]["busy"] == {}
    assert_nothing_held(acct)
    assert acct is not None and acct["peak_device_bytes"] <= n * 2 * (2 << 20)  # bounded: two buffers per GPU


def test_bidirectional_and_staged_figures_come_from_the_right_paths(libdir: Path) -> None:
    env, _ = run_probe(libdir, "ws-4xa6000")
    data = env["data"]
    bidir = {(b["a"], b["b"]): b["total_gbps"] for b in data["bidirectional"]}
    assert bidir[(0, 1)] == pytest.approx(100.0, rel=1e-3)  # bridged pair
    assert bidir[(0, 2)] == pytest.approx(38.0, rel=1e-3)  # PCIe pair
    env, _ = run_probe(libdir, "consumer-8x4090")
    p = env["data"]["pairs"][0]
    assert p["staged"] and p["ce_gbps"] == pytest.approx(19.0, rel=1e-3)
    assert p["latency_us"] == pytest.approx(14.0, rel=1e-3)


def test_copy_corruption_is_caught_by_verification(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100--copy-corrupt")
    bad = [(p["src"], p["dst"], k) for p in env["data"]["pairs"] for k, ok in p["verified"].items() if not ok]
    assert {(s, d) for s, d, _ in bad} == {(1, 6)}
    assert {k for _, _, k in bad} == {"ce", "sm_read", "latency"}
    assert not next(b for b in env["data"]["bidirectional"] if (b["a"], b["b"]) == (1, 6))["verified"]
    assert_nothing_held(acct)


def test_out_of_memory_on_one_gpu_skips_it_and_frees_everything(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100--oom")
    data = env["data"]
    assert env["status"] == "ok"
    assert data["gpus"][4]["status"] == "error" and data["gpus"][4]["error"] == "CUDA_ERROR_OUT_OF_MEMORY"
    assert [e["error"] for e in data["errors"]] == ["CUDA_ERROR_OUT_OF_MEMORY"]
    assert all(4 not in (p["src"], p["dst"]) for p in data["pairs"])
    assert len(data["pairs"]) == 7 * 6 and data["all_to_host"]["gpus"] == [0, 1, 2, 3, 5, 6, 7]
    assert_nothing_held(acct)


def test_launch_failure_stops_measuring_and_still_frees(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100--launch-failure")
    data = env["data"]
    assert [e["error"] for e in data["errors"]] == ["CUDA_ERROR_LAUNCH_FAILED"]
    assert not data["complete"] and data["not_reached"]
    assert data["gpus"][0]["h2d_gbps"] is not None and data["gpus"][0].get("local_sm_gbps") is None
    assert_nothing_held(acct)


@pytest.mark.parametrize(("machine", "needle"), [
    ("dgx-h100--no-device", "no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100)"),
    ("dgx-h100--old-driver", "insufficient driver: CUDA 8.0 driver"),
])
def test_host_that_cannot_answer_is_unsupported_with_the_error_named(libdir: Path, machine: str, needle: str) -> None:
    env, acct = run_probe(libdir, machine)
    assert env["status"] == "unsupported"
    assert any(needle in e for e in env["errors"]), env["errors"]
    assert_nothing_held(acct)


def test_old_driver_reports_the_jit_log(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--old-driver")
    logs = [e.get("jit_log") for e in env["data"]["errors"]]
    assert logs and all("Unsupported .version 6.0" in (log or "") for log in logs)


def test_missing_library_is_unsupported(libdir: Path) -> None:
    script = build_script("p2p", {"lib": str(libdir / "nope" / "libcuda.so.1")}, 10)
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, timeout=60)
    env = json.loads(proc.stdout)
    assert env["status"] == "unsupported" and "cannot load" in env["errors"][0]


def test_bad_arguments_get_one_clear_message(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100", size_mb=0)
    assert env["status"] == "unsupported" and "size_mb must be between" in env["errors"][0]
    env, _ = run_probe(libdir, "dgx-h100", pairs=[[0, 99]])
    assert env["status"] == "unsupported" and "pair member 99" in env["errors"][0]


def test_busy_gpu_is_skipped_unless_forced(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100--busy")
    data = env["data"]
    assert data["guard"] == {"ran": True, "reason": None, "busy": {"3": 1}, "forced": False}
    assert data["gpus"][3]["status"] == "busy" and data["gpus"][3].get("h2d_gbps") is None
    assert all(3 not in (p["src"], p["dst"]) for p in data["pairs"])
    assert_nothing_held(acct)
    env, _ = run_probe(libdir, "dgx-h100--busy", force=True, pairs="none")
    assert env["data"]["gpus"][3]["status"] == "ok" and env["data"]["gpus"][3]["h2d_gbps"] is not None


def test_without_nvml_the_guard_records_that_it_could_not_run(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--busy", nvml=False, pairs="none")
    guard = env["data"]["guard"]
    assert guard["ran"] is False and "NVML unavailable" in guard["reason"]
    assert any("busy GPUs could not be detected" in w for w in env["warnings"])


def test_pair_selection(libdir: Path) -> None:
    env, _ = run_probe(libdir, "ws-4xa6000", pairs="nvlink")
    assert sorted((p["src"], p["dst"]) for p in env["data"]["pairs"]) == [(0, 1), (1, 0), (2, 3), (3, 2)]
    env, _ = run_probe(libdir, "ws-4xa6000", pairs=[[0, 2], ["0000:CA:00.0", 1]])
    assert [(p["src"], p["dst"]) for p in env["data"]["pairs"]] == [(0, 2), (3, 1)]
    assert env["data"]["bidirectional"] == []  # neither pair has its reverse in the list


def test_budget_exhaustion_gives_partial_results_and_frees(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100", budget_s=0)
    data = env["data"]
    assert env["status"] == "ok"
    assert data["budget_exhausted"] and not data["complete"]
    assert data["not_reached"][0] == "h2d gpu0" and "bidir 6->7" in data["not_reached"]
    assert_nothing_held(acct)
    # a budget that runs out part-way: whatever was measured plus what was not reached is everything
    env, acct = run_probe(libdir, "dgx-h100", budget_s=0.3, size_mb=4)
    data = env["data"]
    measured = sum(1 for p in data["pairs"] if p["ce_gbps"] is not None)
    not_reached_ce = sum(1 for u in data["not_reached"] if u.startswith("ce "))
    assert measured + not_reached_ce == 56 or data["complete"]
    assert_nothing_held(acct)


def test_deadline_shorter_than_budget_is_kept(libdir: Path) -> None:
    # a 3.5 s deadline leaves 0.5 s of budget after the 3 s kept for cleanup
    env, acct = run_probe(libdir, "dgx-h100", deadline=3.5, budget_s=600, size_mb=4, repeats=3)
    assert env["status"] == "ok" and env["duration_s"] < 3.5
    assert_nothing_held(acct)


# ------------------------------------------------------------------------------- judgement


def ids(findings: list[Any]) -> set[str]:
    return {f.id for f in findings}


@pytest.mark.parametrize("machine", HEALTHY)
def test_healthy_fixtures_yield_no_findings(libdir: Path, machine: str) -> None:
    env, _ = run_probe(libdir, machine)
    assert judge(env) == []


def test_consumer_cards_get_a_platform_limitation_not_a_fault(libdir: Path) -> None:
    env, _ = run_probe(libdir, "consumer-8x4090")
    found = judge(env)
    assert [(f.id, f.kind.value, f.severity.value) for f in found] == [
        ("p2p.not_possible", "platform_limitation", "info")]


@pytest.mark.parametrize(("machine", "expected"), [
    ("dgx-a100--p2p-disabled", {"p2p.not_possible"}),
    ("dgx-h100--p2p-slow", {"p2p.bandwidth.low", "p2p.slower_than_host"}),
    ("dgx-h100--uplink-contention", {"p2p.uplink.contention"}),
    ("dgx-h100--copy-corrupt", {"p2p.data.mismatch"}),
    ("dgx-h100--oom", {"p2p.gpu.error"}),
    ("dgx-h100--busy", {"p2p.gpu.busy"}),
    ("dgx-h100--launch-failure", {"p2p.cuda.error"}),
    ("dgx-h100--gpu-gen1x8", {"p2p.host_bandwidth.low"}),  # one slow GPU is not uplink contention
    ("dgx-h100--fabric-incomplete", {"p2p.not_possible"}),
    ("dgx-a100--gpu-lost", {"p2p.gpu.error"}),
    ("dgx-h100--links-down", {"p2p.bandwidth.low"}),  # without nvlink facts: judged against all 18 links
])
def test_fault_fixture_yields_its_finding(libdir: Path, machine: str, expected: set[str]) -> None:
    env, _ = run_probe(libdir, machine)
    assert ids(judge(env)) == expected


def test_slow_pair_findings_name_the_pair_and_the_floor(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--p2p-slow")
    low = [f for f in judge(env) if f.id == "p2p.bandwidth.low"]
    assert sorted(f.subject for f in low) == ["GPU2->GPU5 (0000:3a:00.0 -> 0000:ab:00.0)",
                                              "GPU5->GPU2 (0000:ab:00.0 -> 0000:3a:00.0)"]
    assert all(f.expected == 335.0 and f.actual == pytest.approx(12.0) for f in low)


def test_p2p_disabled_is_a_fault_on_bare_metal_and_a_limitation_under_mig(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-a100--p2p-disabled")
    (f,) = judge(env)
    assert f.kind.value == "fault" and f.severity.value == "fail" and f.subject == "56 GPU pairs"
    (f,) = judge(env, facts={"gpus": {"mig_enabled_any": True, "list": []}})
    assert f.kind.value == "platform_limitation"


def test_expectations_override_the_derived_floors(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100")
    found = judge(env, expect=Expectations(p2p_min_gbps=400.0, host_gpu_min_gbps=60.0))
    assert ids(found) == {"p2p.bandwidth.low", "p2p.host_bandwidth.low"}
    assert sum(f.id == "p2p.bandwidth.low" for f in found) == 56
    assert sum(f.id == "p2p.host_bandwidth.low" for f in found) == 16


def test_asymmetry_and_outliers_against_the_hosts_own_pairs(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100")
    data = json.loads(json.dumps(env["data"]))
    for p in data["pairs"]:  # two pairs slow in one direction only, above a 100 GB/s floor
        if (p["src"], p["dst"]) in ((1, 4), (0, 7)):
            p["ce_gbps"] = 240.0
    found = judge({"data": data}, expect=Expectations(p2p_min_gbps=100.0))
    assert {(f.id, f.subject.split(" ")[0]) for f in found} == {
        ("p2p.asymmetric", "GPU1<->GPU4"), ("p2p.asymmetric", "GPU0<->GPU7"),
        ("p2p.outlier", "GPU1->GPU4"), ("p2p.outlier", "GPU0->GPU7")}


def test_link_class_comes_from_topology_facts_when_present(libdir: Path) -> None:
    env, _ = run_probe(libdir, "ws-4xa6000")
    p2p = normalize(env["data"])
    order = p2p["order"]
    topo = {"devices": [{"name": f"GPU{i}", "kind": "gpu", "bus_id": b} for i, b in enumerate(order)],
            "matrix": [["X", "NV4", "SYS", "SYS"], ["NV4", "X", "SYS", "SYS"],
                       ["SYS", "SYS", "X", "NV4"], ["SYS", "SYS", "NV4", "X"]]}
    link = checks._HostLinks({"topology": topo}, p2p).link(order[0], order[1])
    assert link == checks.Link("nvlink", 4, "NV4", "topology")
    assert checks._HostLinks({"topology": topo}, p2p).link(order[0], order[2]).level == "SYS"
    nvl = {"order": order, "supported": True, "nv": [[None, 4, None, None], [4, None, None, None],
                                                     [None, None, None, 4], [None, None, 4, None]]}
    assert checks._HostLinks({"nvlink": nvl}, p2p).link(order[2], order[3]).source == "nvlink"
    assert checks._HostLinks({}, p2p).link(order[0], order[1]).source == "nvml-p2p"
    assert judge(env, facts={"topology": topo, "nvlink": nvl}) == []


def test_checks_skip_a_probe_that_did_not_run(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--copy-corrupt")
    assert judge(env, outcome="failed") == []


def test_budget_exhaustion_is_a_warning_of_unknown_kind(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100", budget_s=0)
    (f,) = judge(env)
    assert (f.id, f.severity.value, f.kind.value) == ("p2p.budget.exhausted", "warn", "unknown")


# ------------------------------------------------------------------------------- normalize and view


def test_normalized_matrices_by_index_joined_on_bus_id(libdir: Path) -> None:
    env, _ = run_probe(libdir, "ws-4xa6000")
    p2p = normalize(env["data"])
    assert p2p["order"][1] == "0000:65:00.0"
    assert p2p["matrices"]["ce_gbps"][0][1] == pytest.approx(50.5, rel=1e-3)
    src, dst = p2p["order"].index("0000:17:00.0"), p2p["order"].index("0000:65:00.0")
    assert p2p["matrices"]["ce_gbps"][src][dst] == pytest.approx(50.5, rel=1e-3)
    assert "by_bus" not in p2p  # the bus-keyed duplicate is gone: readers join through "order"
    assert p2p["matrices"]["ce_gbps"][2][2] == pytest.approx(340.0, rel=1e-3)  # diagonal: local copy
    assert p2p["summary"]["min_gbps"] == pytest.approx(20.5, rel=1e-3)
    assert p2p["all_to_host"]["d2h_sum_single_gbps"] == pytest.approx(100.0, rel=1e-3)
    with pytest.raises(ValueError):
        normalize([])  # type: ignore[arg-type]


def test_view_prints_p2pbandwidthlatencytest_style_matrices(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--p2p-slow")
    text = render(normalize(env["data"]), host="gpu\x1b[31m07")
    assert "Unidirectional copy-engine bandwidth (GB/s)" in text
    row2 = next(line for line in text.splitlines()[text.splitlines().index(
        next(x for x in text.splitlines() if x.startswith("Unidirectional copy-engine"))) + 1:]
        if line.split()[:1] == ["2"])
    assert "12.00" in row2 and "376.00" in row2
    assert "\x1b" not in text
    assert render(None) == "p2p: not measured\n"


def test_links_down_is_judged_against_the_links_still_up(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100--links-down")
    order = normalize(env["data"])["order"]
    nv = [[None if a == b else (16 if 2 in (a, b) else 18) for b in range(8)] for a in range(8)]
    assert judge(env, facts={"nvlink": {"order": order, "supported": True, "nv": nv}}) == []


def test_mesh_pairs_with_unknown_link_count_are_not_compared_with_full_links(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx1-v100")
    found = judge(env)
    assert ids(found) == {"p2p.uplink.contention"}  # NV1 pairs at 22.5 GB/s are neither low nor outliers
    assert {f.kind.value for f in found} == {"fault"} and len(found) == 2  # d2h and h2d
    order = normalize(env["data"])["order"]
    pcie = {"uplinks": [{"id": f"sw{k}", "type": "switch", "gpus": order[2 * k:2 * k + 2]} for k in range(4)]}
    found = judge(env, facts={"pcie": pcie})
    assert {(f.id, f.kind.value, f.severity.value) for f in found} == {
        ("p2p.uplink.contention", "platform_limitation", "info")}
    assert "shared uplink: 0000:06:00.0, 0000:07:00.0" in found[0].evidence


def test_every_shipped_fixture_builds_and_runs(libdir: Path) -> None:
    for machine in machines():
        env, acct = run_probe(libdir, machine, pairs="none", repeats=1, loops=1)
        assert env["status"] in ("ok", "unsupported"), (machine, env["errors"])
        assert_nothing_held(acct)


def test_peer_mappings_are_released_pair_by_pair(libdir: Path) -> None:
    env, acct = run_probe(libdir, "dgx-h100--peer-limit")
    pairs = env["data"]["pairs"]
    assert len(pairs) == 56 and all(p["peer_enabled"] and p["peer_error"] is None for p in pairs)
    assert_nothing_held(acct)


def test_too_many_peers_is_a_platform_limitation(libdir: Path) -> None:
    env, _ = run_probe(libdir, "dgx-h100", pairs=[[0, 1]])
    data = json.loads(json.dumps(env["data"]))
    data["pairs"][0].update(peer_enabled=False, peer_error="CUDA_ERROR_TOO_MANY_PEERS")
    found = judge({"data": data})
    assert [(f.id, f.kind.value, f.actual) for f in found] == [
        ("p2p.not_possible", "platform_limitation", "CUDA_ERROR_TOO_MANY_PEERS")]


def test_probe_parses_as_python_3_6() -> None:
    import ast

    ast.parse((ROOT / "probes" / "p2p.py").read_text(), feature_version=(3, 6))
    ast.parse((ROOT / "probes" / "_prelude.py").read_text(), feature_version=(3, 6))
