"""verdict/checks/nccl.py on facts normalized from the demo recordings, altered the way real hosts differ.

The four NCCL demo hosts each raise exactly their findings; variants of their facts cover the
floors (model, PCIe box from the host-staging rate), the platform limitations, errors and hangs.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.facts import gpu_models
from orchestrator.verdict import checks as checks_registry
from orchestrator.verdict import coverage
from orchestrator.verdict.checks import nccl as checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from tests.verdict.test_verdict_demo import recorded_facts

OUTCOMES = {"host": "ok", "pcie": "ok", "nvml": "ok", "nvlink": "ok", "p2p": "ok", "nccl": "ok"}


def judge(facts: dict[str, Any], outcomes: dict[str, str] | None = None) -> list[Any]:
    view = HostView(name="h", facts=facts, outcomes=dict(OUTCOMES, **(outcomes or {})))
    return [f for check in checks.CHECKS for f in check(view)]


def ids(findings: list[Any]) -> list[str]:
    return sorted(f.id for f in findings)


@pytest.fixture(scope="module")
def demo() -> dict[str, dict[str, Any]]:
    return {h: recorded_facts(h) for h in ("dgx-h100-12", "dgx-h100-13", "dgx-h100-14", "dgx-h100-15")}


def test_each_nccl_demo_host_raises_exactly_its_findings(demo: dict[str, dict[str, Any]]) -> None:
    assert ids(judge(demo["dgx-h100-12"])) == []  # 468 GB/s on NVLS against the 460 floor
    [shm] = judge(demo["dgx-h100-13"])
    assert shm.id == "nccl.transport.unexpected" and shm.kind.value == "fault" and shm.actual == "SHM"
    assert "peer access is off on 56 of 56 GPU pairs" in shm.message  # the p2p cross-check
    [slow] = judge(demo["dgx-h100-14"])
    assert slow.id == "nccl.slower_than_pcie" and slow.actual < 27.6
    assert "the links are fine" in slow.message and "fabric manager" in slow.message
    [env] = judge(demo["dgx-h100-15"])
    assert env.id == "nccl.env.override" and env.severity.value == "warn"
    assert env.actual == {"NCCL_P2P_DISABLE": "1"} and "ran without them" in env.message


def _with(facts: dict[str, Any], **nccl: Any) -> dict[str, Any]:
    out = copy.deepcopy(facts)
    out["nccl"].update(nccl)
    return out


def _scaled(facts: dict[str, Any], busbw: float) -> dict[str, Any]:
    out = copy.deepcopy(facts)
    for r in out["nccl"]["results"]:
        r["busbw_gbps"] = busbw
    return out


def test_floor_per_model_and_gpu_count(demo: dict[str, dict[str, Any]]) -> None:
    healthy = demo["dgx-h100-12"]
    floor = gpu_models.nccl_allreduce_floor("H100-SXM", 8)
    assert floor == 460.0
    [low] = judge(_scaled(healthy, 300.0))
    assert low.id == "nccl.busbw.low" and low.expected == floor and low.actual == 300.0
    assert "AzHPC" in low.message and "the links are fine" in low.message
    assert judge(_scaled(healthy, 461.0)) == []
    assert gpu_models.nccl_allreduce_floor("A100-SXM", 8) == 228.0
    assert gpu_models.nccl_allreduce_floor("H200-SXM", 8) == 431.0
    assert gpu_models.nccl_allreduce_floor("H100-SXM", 4) is None  # no published figure: not guessed


def test_a_small_largest_message_is_not_judged_against_the_floor(demo: dict[str, dict[str, Any]]) -> None:
    small = _scaled(demo["dgx-h100-12"], 300.0)
    small["nccl"]["results"] = [r for r in small["nccl"]["results"] if r["size_bytes"] < (256 << 20)]
    [f] = judge(small)
    assert f.id == "nccl.busbw.low" and f.kind.value == "unknown" and "not judged" in f.message


def test_pcie_box_floor_comes_from_the_host_staging_rate(demo: dict[str, dict[str, Any]]) -> None:
    pcie = copy.deepcopy(demo["dgx-h100-12"])
    for key in ("nvlink", "topology"):
        pcie.pop(key, None)
    pcie["p2p"]["nvml_nvlink"] = None
    pcie["nccl"]["gpu_model"] = "L40S"  # a PCIe card: no NVLink, no published floor
    stage, _ = checks.staging_rate(pcie)
    assert stage == pytest.approx(27.6)
    floor = round(stage * gpu_models.NCCL_PCIE_STAGED_RATIO, 1)
    [low] = judge(_scaled(pcie, floor - 1))
    assert low.id == "nccl.busbw.low" and low.expected == floor and "host-staging rate" in low.message
    assert judge(_scaled(pcie, floor + 1)) == []


def test_shm_under_vgpu_is_a_platform_limitation(demo: dict[str, dict[str, Any]]) -> None:
    vm = copy.deepcopy(demo["dgx-h100-13"])
    vm["gpus"]["virtualized"] = True
    [f] = judge(vm)
    assert f.id == "nccl.transport.unexpected" and f.kind.value == "platform_limitation"
    guest = _with(demo["dgx-h100-13"], virtualization_mode=2)  # the probe's own NVML answer, no nvml facts
    guest.pop("gpus", None)
    [g] = judge(guest)
    assert g.kind.value == "platform_limitation" and "vGPU" in g.message


def test_errors_hangs_wrong_data_and_mig(demo: dict[str, dict[str, Any]]) -> None:
    healthy = demo["dgx-h100-12"]
    err = _with(healthy, errors=[{"where": "ncclCommInitAll over 8 GPUs", "error": "ncclSystemError",
                                  "message": "ncclCommInitAll: ncclSystemError (2)"}], results=[])
    [f] = judge(err)
    assert f.id == "nccl.error" and f.actual == "ncclSystemError"
    hang = _with(healthy, hang={"op": "all_reduce", "size_bytes": 1 << 20, "after_s": 30.0})
    assert "nccl.error" in ids(judge(hang))
    wrong = copy.deepcopy(healthy)
    wrong["nccl"]["results"][2]["wrong"] = 3
    [w] = judge(wrong)
    assert w.id == "nccl.data.wrong" and w.actual == 3
    mig = _with(healthy, limitation="MIG is enabled on 0000:18:00.0: NCCL cannot span MIG instances", results=[])
    [m] = judge(mig)
    assert m.id == "nccl.error" and m.kind.value == "platform_limitation"


def test_kept_settings_name_the_cause_of_shm(demo: dict[str, dict[str, Any]]) -> None:
    kept = _with(demo["dgx-h100-13"], env_overrides={"NCCL_P2P_DISABLE": "1"}, env_kept=True)
    found = {f.id: f for f in judge(kept)}
    assert set(found) == {"nccl.transport.unexpected", "nccl.env.override"}
    assert "NCCL_P2P_DISABLE is set and was kept" in found["nccl.transport.unexpected"].message
    assert "measured under them" in found["nccl.env.override"].message


def test_nothing_is_judged_when_the_probe_did_not_run_or_one_gpu(demo: dict[str, dict[str, Any]]) -> None:
    assert judge(demo["dgx-h100-14"], {"nccl": "unsupported"}) == []
    one = _with(_scaled(demo["dgx-h100-12"], 0.0), gpu_count=1)
    assert judge(one) == []  # busbw is 0 by definition with one rank


def test_boxes_without_a_published_floor_are_judged_against_their_peers(demo: dict[str, dict[str, Any]]) -> None:
    def box(name: str, busbw: float) -> HostView:
        facts = _scaled(demo["dgx-h100-12"], busbw)
        facts["nccl"]["gpu_model"] = "L40S"  # no published floor
        return HostView(name=name, facts=facts, outcomes=dict(OUTCOMES))

    views = [box("a", 20.0), box("b", 21.0), box("c", 19.0), box("d", 9.0)]
    [low] = list(checks.check_nccl_peers(views))
    assert low.host == "d" and low.id == "nccl.busbw.low" and low.expected == round(19.5 * checks.PEER_RATIO, 1)
    assert "its peers" in low.message
    assert list(checks.check_nccl_peers([views[0], views[3]])) == []  # two hosts are too few to have a median
    published = [HostView(name=n, facts=_scaled(demo["dgx-h100-12"], bw), outcomes=dict(OUTCOMES))
                 for n, bw in (("a", 470.0), ("b", 471.0), ("c", 300.0))]
    assert list(checks.check_nccl_peers(published)) == []  # judged by the published floor instead


def test_busy_gpus_left_out_make_the_floor_not_judged(demo: dict[str, dict[str, Any]]) -> None:
    partial = _with(_scaled(demo["dgx-h100-12"], 300.0), gpu_count=6, busy_gpus=["0000:18:00.0", "0000:2a:00.0"])
    [f] = judge(partial)
    assert f.id == "nccl.busbw.low" and f.kind.value == "unknown" and "2 were busy" in f.message


def _unjudged(facts: dict[str, Any]) -> dict[str, str]:
    """The nccl ids coverage holds back on this host (the rest pass unless raised)."""
    outcomes = dict(OUTCOMES)
    probes = {p: {"outcome": o, "reason": ""} for p, o in outcomes.items()}
    return {k: v for k, v in coverage.not_judged(facts, outcomes, probes, Expectations()).items()
            if k.startswith("nccl.")}


def test_what_the_check_did_not_judge_is_never_passed(demo: dict[str, dict[str, Any]]) -> None:
    """Each early return of check_nccl is "not judged" with its reason in coverage: before, JUnit
    passed nccl.busbw.low on the 23.6 GB/s H100 box and on one GPU or an NCCL that returned nothing."""
    assert _unjudged(demo["dgx-h100-12"]) == {}  # the healthy box: every nccl check judged it
    assert set(_unjudged(demo["dgx-h100-13"])) == {"nccl.busbw.low", "nccl.slower_than_pcie"}
    assert "judged as nccl.transport.unexpected" in _unjudged(demo["dgx-h100-13"])["nccl.busbw.low"]
    slow = _unjudged(demo["dgx-h100-14"])
    assert set(slow) == {"nccl.busbw.low"} and "nccl.slower_than_pcie holds" in slow["nccl.busbw.low"]
    one = _unjudged(_with(demo["dgx-h100-12"], gpu_count=1))
    assert set(one) == {"nccl.busbw.low", "nccl.slower_than_pcie", "nccl.transport.unexpected"}
    assert "fewer than 2 GPUs" in one["nccl.busbw.low"]
    err = _unjudged(_with(demo["dgx-h100-12"], results=[], errors=[{"where": "init", "error": "x", "message": "m"}]))
    assert set(err) == {"nccl.busbw.low", "nccl.slower_than_pcie", "nccl.transport.unexpected", "nccl.data.wrong"}
    busy = _unjudged(_with(demo["dgx-h100-12"], limitation="GPUs busy", results=[]))
    assert busy["nccl.transport.unexpected"] == "not measured: GPUs busy"
    assert judge(_with(demo["dgx-h100-12"], limitation="GPUs busy", results=[])) == []  # no finding either
    unlisted = _with(demo["dgx-h100-12"], gpu_count=4)  # no published floor for 4x H100-SXM, no peers here
    assert "nccl.busbw.low" not in _unjudged(unlisted)  # left to the peer comparison, which says
    views = [HostView(name="h", facts=checks_registry.fleet_facts(unlisted), outcomes=dict(OUTCOMES))]
    assert "at least 3" in checks.peers_not_judged(views)["h"]
    judged_alone = [HostView(name="h", facts=checks_registry.fleet_facts(demo["dgx-h100-12"]),
                             outcomes=dict(OUTCOMES))]
    assert checks.peers_not_judged(judged_alone) == {}


def test_a_fleet_without_peers_records_busbw_as_not_judged(demo: dict[str, dict[str, Any]]) -> None:
    """fleet.json's fleet-level not_judged names the host the peer comparison could not judge, and
    JUnit's states read it back (coverage.check_states) instead of a pass."""
    unlisted = _with(demo["dgx-h100-12"], gpu_count=4)
    views = [HostView(name=n, facts=checks_registry.fleet_facts(f), outcomes=dict(OUTCOMES))
             for n, f in (("lone", unlisted), ("ok", demo["dgx-h100-12"]))]
    fleet_level = {"nccl.busbw.low": checks.peers_not_judged(views)}
    on_lone = {fid: hosts["lone"] for fid, hosts in fleet_level.items() if "lone" in hosts}
    state = coverage.check_states({}, [], ["nccl.busbw.low"], on_lone)["nccl.busbw.low"]
    assert state.state == coverage.NOT_JUDGED and "no published floor for 4x H100-SXM" in state.reason


def test_merge_tells_the_peer_comparison_from_the_host_floor(demo: dict[str, dict[str, Any]]) -> None:
    """nccl.busbw.low comes from check_nccl (a host's own floor: kept by `probe merge`) and from
    check_nccl_peers (judged over one shard only: dropped and judged again over all).  Before, the
    merge kept a shard's peer finding and raised the fleet's again beside it."""
    def box(name: str, busbw: float) -> HostView:
        facts = _scaled(demo["dgx-h100-12"], busbw)
        facts["nccl"]["gpu_model"] = "L40S"
        return HostView(name=name, facts=facts, outcomes=dict(OUTCOMES))

    [peer] = list(checks.check_nccl_peers([box("a", 20.0), box("b", 21.0), box("c", 19.0), box("d", 9.0)]))
    [own] = judge(_scaled(demo["dgx-h100-12"], 300.0))
    assert peer.id == own.id == "nccl.busbw.low" and peer.subject != own.subject
    assert checks_registry.is_fleet_finding(peer.to_dict())
    assert not checks_registry.is_fleet_finding(own.to_dict())
    assert checks_registry.is_fleet_finding({"id": "identity.uuid.duplicate", "subject": "GPU"})


def test_multi_node_network_settings_are_not_stale_overrides(demo: dict[str, dict[str, Any]]) -> None:
    """NCCL_SOCKET_IFNAME / NCCL_IB_HCA are set on purpose for jobs across nodes and change nothing
    in one host's all_reduce: the healthy box raises nothing; a real override is named alone."""
    site = {"NCCL_SOCKET_IFNAME": "ens1", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}
    assert judge(_with(demo["dgx-h100-12"], env_overrides=site)) == []
    [env] = judge(_with(demo["dgx-h100-12"], env_overrides={**site, "NCCL_P2P_DISABLE": "1"}))
    assert env.id == "nccl.env.override" and env.actual == {"NCCL_P2P_DISABLE": "1"}
    assert "NCCL_SOCKET_IFNAME" not in env.message
