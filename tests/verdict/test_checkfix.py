"""Fixes to the GPU and PCIe checks found in review, each on the demo's recorded facts or on real
text evidence: duplicate identities at fleet scale, null (unknown) sections of text imports, GPUs
without bus ids, the model table's PCIe generation, NVML's GPU numbers in PCIe findings, and the
GPU<->NIC affinity judged from a `topo -m` matrix alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.verdict.checks import gpu as gpu_checks
from orchestrator.verdict.checks import pcie as pcie_checks
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Finding
from tests.facts.test_textparse_facts import imp
from tests.verdict.test_verdict_demo import recorded_facts

ALL_OK = {"host": "ok", "pcie": "ok", "nvml": "ok", "nvlink": "ok"}


def run(facts: dict[str, Any], outcomes: dict[str, str] | None = None, **expect: Any) -> list[Finding]:
    view = HostView(name="h", facts=facts, outcomes=dict(ALL_OK if outcomes is None else outcomes),
                    expect=Expectations.from_mapping(expect))
    return [f for c in [*gpu_checks.CHECKS, *pcie_checks.CHECKS] for f in c(view)]


def keys(fs: list[Finding], fid: str | None = None) -> list[tuple[str, str, str, str]]:
    return sorted((f.id, f.severity.value, f.kind.value, f.subject) for f in fs if fid is None or f.id == fid)


# --- identity duplicates: a few named, the rest counted ---------------------------------------------

def test_duplicate_uuid_messages_name_at_most_five_other_places_and_count_the_rest() -> None:
    facts = recorded_facts("dgx-h100-01")  # 40 hosts that all report these 8 UUIDs
    views = [HostView(name=f"h{i:02}", facts=facts, outcomes=dict(ALL_OK)) for i in range(40)]
    fs = [f for f in gpu_checks.check_uuid_duplicates(views)]
    uuid0 = facts["gpus"]["list"][0]["uuid"]
    mine = [f for f in fs if f.subject == uuid0]
    assert len(fs) == 8 * 40 and len(mine) == 40
    f = next(f for f in mine if f.host == "h07")
    places = f.message.split(": ", 1)[1]
    # this host's own place, five elsewhere, and a count of the other 34
    assert places == ("h07:GPU0 (0000:18:00.0), h00:GPU0 (0000:18:00.0), h01:GPU0 (0000:18:00.0), "
                      "h02:GPU0 (0000:18:00.0), h03:GPU0 (0000:18:00.0), h04:GPU0 (0000:18:00.0) and 34 more")
    assert f.actual == {"count": 40, "named": places.split(" and ")[0].split(", ")}
    assert "40 hosts report it" in f.evidence
    # the text per finding does not grow with the fleet
    assert max(len(x.message) for x in fs) < 400


def test_duplicate_uuid_on_two_hosts_still_names_every_place() -> None:
    facts = recorded_facts("dgx-h100-01")
    views = [HostView(name=n, facts=facts, outcomes=dict(ALL_OK)) for n in ("a", "b")]
    uuid0 = facts["gpus"]["list"][0]["uuid"]
    f = next(f for f in gpu_checks.check_uuid_duplicates(views) if f.host == "b" and f.subject == uuid0)
    assert f.message.endswith("appears 2 times in the fleet: b:GPU0 (0000:18:00.0), a:GPU0 (0000:18:00.0)")
    assert f.actual == {"count": 2, "named": ["b:GPU0 (0000:18:00.0)", "a:GPU0 (0000:18:00.0)"]}


# --- text imports: null sections and null bus ids -------------------------------------------------------

def test_lspci_only_import_is_not_zero_gpus() -> None:
    # `lspci -vvv | grep Lnk` has no device classes: pcie.gpus is null (unknown), not []
    h = imp("lspci_vvv_grep_lnk_2x_rtx3090_gen1_x8_downgraded_01.txt")
    assert h.facts["pcie"]["gpus"] is None
    view = HostView("h", h.facts, h.outcomes, Expectations(gpu_count=8))
    assert [f.id for f in gpu_checks.check_count(view)] == []


def test_unknown_bus_gpu_list_is_not_cross_checked_against_nvml() -> None:
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    facts["pcie"]["gpus"] = None
    assert keys(run(facts, gpu_count=8), "gpu.count.pci_vs_nvml") == []
    assert keys(run(facts, gpu_count=8), "gpu.count.mismatch") == []
    facts["pcie"]["gpus"] = facts["pcie"]["gpus"] or ["0000:18:00.0"]  # a known list is still judged
    assert keys(run(facts), "gpu.count.pci_vs_nvml") == [
        ("gpu.count.pci_vs_nvml", "fail", "fault", ", ".join(facts["gpus"]["order"][1:]))]


def _without_bus_ids(facts: dict[str, Any]) -> dict[str, Any]:
    facts = copy.deepcopy(facts)
    for section in ("gpus", "nvlink"):
        facts[section]["order"] = [None] * len(facts[section]["order"])
    for g in facts["gpus"]["list"] + facts["nvlink"]["gpus"]:
        g["bus_id"] = None
    return facts


def test_gpus_without_bus_ids_are_kept_apart_in_the_nvlink_check() -> None:
    # dgx-h100-04: GPU2 has 2 of 18 links down.  MIG on GPU7 must not make GPU2's fault a limitation
    # (keyed by bus id, every GPU was "None" and so was taken for the last one, GPU7).
    facts = _without_bus_ids(recorded_facts("dgx-h100-04"))
    facts["gpus"]["list"][7]["mig"] = {"current": True, "pending": False, "instances": []}
    assert keys(run(facts), "nvlink.link.down") == [("nvlink.link.down", "fail", "fault", "GPU2 (bus id unknown)")]


def test_gpus_without_bus_ids_are_kept_apart_in_the_p2p_status_check() -> None:
    facts = _without_bus_ids(recorded_facts("dgx-h100-01"))
    # every pair has NV18 and P2P OK: nothing (keyed by None, every pair was GPU0<->GPU0, status "X")
    assert keys(run(facts), "nvlink.p2p_status_mismatch") == []
    status = facts["gpus"]["p2p"]["nvlink"]
    status[1][2] = status[2][1] = "NS"
    assert keys(run(facts), "nvlink.p2p_status_mismatch") == [
        ("nvlink.p2p_status_mismatch", "fail", "fault", "GPU1<->GPU2 (bus id unknown / bus id unknown)")]


# --- GPU<->NIC affinity from a topo -m matrix ------------------------------------------------------------

def test_gpu_nic_affinity_is_judged_on_a_topo_only_import() -> None:
    h = imp("topo_8x_rtx4090_all_sys_2nic_01.txt")  # both NICs PHB to GPU6, SYS to every other GPU
    assert "pcie" not in h.facts
    view = HostView("h", h.facts, h.outcomes, Expectations(gpu_nic_level="PHB"))
    got = [(f.id, f.subject, f.actual) for f in pcie_checks.check_gpu_nic_affinity(view)]
    assert got == [("pcie.gpu_nic.affinity", f"GPU{i} (bus id unknown)", "SYS") for i in (0, 1, 2, 3, 4, 5, 7)]
    h2 = imp("topo_h100_sxm_8gpu_8nic_pix_01.txt")  # GPUk-NICk PIX: fine at PIX, fine at NODE
    for level in ("PIX", "NODE"):
        view = HostView("h", h2.facts, h2.outcomes, Expectations(gpu_nic_level=level))
        assert list(pcie_checks.check_gpu_nic_affinity(view)) == []


def test_topology_without_nic_cells_is_not_judged_as_no_nic() -> None:
    # A live run whose pcie probe failed: the merged matrix has no GPU x NIC cells: unknown, not "no NIC"
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    del facts["pcie"]
    topo = facts["topology"]
    for i, d in enumerate(topo["devices"]):
        for j, e in enumerate(topo["devices"]):
            if {d["kind"], e["kind"]} == {"gpu", "nic"}:
                topo["matrix"][i][j] = None
    outcomes = {**ALL_OK, "pcie": "failed"}
    assert keys(run(facts, outcomes, gpu_nic_level="PIX"), "pcie.gpu_nic.affinity") == []


def test_pcie_levels_still_win_over_the_topology_matrix() -> None:
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    for row in facts["topology"]["matrix"]:  # a matrix that disagrees is not read while levels exist
        row[:] = ["SYS" if c in ("PIX", "NODE") else c for c in row]
    assert keys(run(facts, gpu_nic_level="PIX"), "pcie.gpu_nic.affinity") == []
    del facts["pcie"]["levels"]
    assert len(keys(run(facts, gpu_nic_level="PIX"), "pcie.gpu_nic.affinity")) == 8


# --- PCIe generation from the model table ---------------------------------------------------------------

def _gpu_and_port(facts: dict[str, Any], bdf: str) -> tuple[dict[str, Any], dict[str, Any]]:
    devs = {d["bdf"]: d for d in facts["pcie"]["devices"]}
    return devs[bdf], devs[devs[bdf]["parent"]]


def test_a_gen5_gpu_in_a_gen4_slot_is_a_slot_limitation() -> None:
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    gpu, port = _gpu_and_port(facts, "0000:3a:00.0")
    gpu["link"].update(gen_current=4, speed_current="16.0 GT/s")  # the GPU advertises Gen5, trains Gen4
    port["link"].update(gen_current=4, gen_max=4, speed_current="16.0 GT/s", speed_max="16.0 GT/s")
    fs = [f for f in run(facts) if f.id.startswith("pcie.link")]
    assert keys(fs) == [("pcie.link.downgraded", "info", "platform_limitation", "GPU2 (0000:3a:00.0)")]
    assert "slot supports Gen4" in fs[0].message and fs[0].expected == "Gen5 x16"
    # a written requirement still decides: Gen4 accepted, Gen5 required
    assert keys(run(facts, pcie_gen=4), "pcie.link.downgraded") == []
    assert keys([f for f in run(facts, pcie_gen=5) if f.id.startswith("pcie.link")]) == [
        ("pcie.link.downgraded", "fail", "fault", "GPU2 (0000:3a:00.0)")]


def test_a_gpu_advertising_less_than_its_model_in_a_capable_slot_is_a_warning() -> None:
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    gpu, _ = _gpu_and_port(facts, "0000:3a:00.0")
    gpu["link"].update(gen_current=4, gen_max=4, speed_current="16.0 GT/s", speed_max="16.0 GT/s")
    fs = [f for f in run(facts) if f.id.startswith("pcie.link")]
    assert keys(fs) == [("pcie.link.downgraded", "warn", "fault", "GPU2 (0000:3a:00.0)")]
    assert "below the H100-SXM's Gen5, in a slot that supports Gen5" in fs[0].message


def test_idle_speed_stays_unknown_with_the_model_generation() -> None:
    # trained below both ends (the normalizer lists it in `downgraded`): idle GPUs do this, so unknown
    facts = copy.deepcopy(recorded_facts("dgx-h100-01"))
    gpu, _ = _gpu_and_port(facts, "0000:3a:00.0")
    gpu["link"].update(gen_current=1, speed_current="2.5 GT/s")
    facts["pcie"]["downgraded"] = [{"bdf": "0000:3a:00.0", "kind": "gpu", "gen_current": 1, "gen_max": 5,
                                    "speed_current": "2.5 GT/s", "speed_max": "32.0 GT/s",
                                    "width_current": 16, "width_max": 16}]
    assert keys([f for f in run(facts) if f.id.startswith("pcie.link")]) == [
        ("pcie.link.downgraded", "info", "unknown", "GPU2 (0000:3a:00.0)")]


def test_model_generation_is_not_applied_to_an_emulated_bus() -> None:
    facts = copy.deepcopy(recorded_facts("vm-a100-01"))  # A100 = Gen4; a VM's link fields are invented
    for d in facts["pcie"]["devices"]:
        if d["kind"] == "gpu":
            d["link"].update(gen_current=1, gen_max=1, speed_current="2.5 GT/s", speed_max="2.5 GT/s")
    assert [f for f in run(facts) if f.id.startswith("pcie.link")] == []


@pytest.mark.parametrize("host", ["dgx-h100-01", "dgx-a100-01", "dgx1-v100-01", "rtx4090-01", "ws-a6000-01"])
def test_healthy_demo_hosts_meet_their_model_generation(host: str) -> None:
    assert [f for f in run(recorded_facts(host)) if f.id.startswith("pcie.link")] == []


# --- GPU numbers in PCIe findings ------------------------------------------------------------------------

def test_a_gpu_missing_from_nvml_has_no_number_and_without_nvml_bus_order_is_used() -> None:
    facts = recorded_facts("dgx-h100-05")  # 0000:ba:00.0 on the bus, not in NVML
    assert keys(run(facts), "gpu.count.pci_vs_driver") == [
        ("gpu.count.pci_vs_driver", "fail", "fault", "GPU? (0000:ba:00.0)")]
    no_nvml = {k: v for k, v in ALL_OK.items() if k not in ("nvml", "nvlink")}
    assert keys(run(facts, no_nvml), "gpu.count.pci_vs_driver") == [
        ("gpu.count.pci_vs_driver", "fail", "fault", "GPU6 (0000:ba:00.0)")]


def test_nvml_without_bus_ids_falls_back_to_bus_order() -> None:
    facts = _without_bus_ids(recorded_facts("dgx-h100-05"))
    assert keys(run(facts), "gpu.count.pci_vs_driver") == [
        ("gpu.count.pci_vs_driver", "fail", "fault", "GPU6 (0000:ba:00.0)")]


# --- nvlink_all_up --------------------------------------------------------------------------------------

def test_nvlink_all_up_passes_a_healthy_bridged_pair_and_fails_one_inactive_link() -> None:
    facts = copy.deepcopy(recorded_facts("ws-a6000-01"))
    assert keys(run(facts, nvlink_all_up=True), "nvlink.link.down") == []
    g = facts["nvlink"]["gpus"][0]
    g["inactive"], g["links_up"] = [3], 3
    g["links"][3]["state"] = "down"
    fs = [f for f in run(facts, nvlink_all_up=True) if f.id == "nvlink.link.down"]
    assert [(f.severity.value, f.expected, f.actual) for f in fs] == [("fail", 4, 3)]
    # with nothing written, every link down on a bridge-optional card is "no bridge", not a fault
    for lk in g["links"]:
        lk["state"] = "down"
    g["inactive"], g["links_up"] = [0, 1, 2, 3], 0
    assert [f.subject for f in run(facts) if f.id == "nvlink.link.down"] == []
    assert [f.actual for f in run(facts, nvlink_all_up=True) if f.id == "nvlink.link.down"] == [0]


# --- p2p lookups with unknown bus ids --------------------------------------------------------------------

def test_p2p_pair_link_and_gpu_pcie_never_match_an_unknown_bus_id() -> None:
    from orchestrator.facts import gpu_models
    from orchestrator.verdict.checks import p2p as p2p_checks

    facts = _without_bus_ids(recorded_facts("dgx-h100-01"))
    for d in facts["topology"]["devices"]:
        d["bus_id"] = None  # a topo -m import: every device's bus id unknown
    # an unknown bus id is not the first GPU whose bus id is also unknown (its NV18 row)
    assert p2p_checks._HostLinks(facts, {}).link(None, None).source == "none"  # type: ignore[arg-type]
    facts["gpus"]["list"][0]["pcie"].update(gen_max=1, width_max=1)
    h100 = gpu_models.lookup("NVIDIA H100 80GB HBM3")  # exact names: "H100" alone names no product
    assert p2p_checks._HostPcie(facts).get(None, h100) == (5, 16)  # type: ignore[arg-type]
