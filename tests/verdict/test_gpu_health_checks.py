"""GPU counter and software checks (verdict/checks/gpu_health.py, software.py): what is judged as an
absolute, what only as growth within one boot, and versions against peers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from orchestrator.verdict.checks import gpu_health, software
from orchestrator.verdict.checks.base import HostView


def gpu(index: int = 0, **kw: Any) -> dict[str, Any]:
    g = {"index": index, "bus_id": f"0000:{0x18 + index:02x}:00.0", "name": "NVIDIA H100 80GB HBM3", "model": "H100",
         "vbios": "96.00.99.00.01", "temperature_c": 40,
         "ecc": {"volatile_uncorrected": 0, "aggregate_uncorrected": 0, "aggregate_corrected": 0,
                 "locations": {"dram": {"aggregate_uncorrected": 0, "aggregate_corrected": 0},
                               "sram": {"aggregate_uncorrected": 0, "aggregate_corrected": 0}}},
         "power_limits": {"limit_w": 700.0, "default_limit_w": 700.0, "enforced_limit_w": 700.0},
         "clock_event_reasons": 1, "clock_event_reason_names": ["gpu_idle"], "pcie_replays": 0,
         "retired_pages_pending": None}
    g.update(kw)
    return g


def view(gpus: list[dict[str, Any]], boot: str = "b1", previous: dict[str, Any] | None = None,
         name: str = "h1", **facts: Any) -> HostView:
    f = {"gpus": {"list": gpus, "cuda_driver_version": "12.4"}, "kmsg": {"boot_id": boot}, **facts}
    return HostView(name=name, facts=f, outcomes={"nvml": "ok", "nvlink": "ok"}, previous=previous)


def run(check: Any, v: HostView) -> list[tuple[str, str, str]]:
    return sorted((f.id, f.severity.value, f.subject) for f in check(v))


def test_uncorrectable_ecc_since_the_driver_loaded_fails_lifetime_only_warns() -> None:
    ecc = copy.deepcopy(gpu()["ecc"])
    ecc.update(volatile_uncorrected=2, aggregate_uncorrected=2)
    ecc["locations"]["sram"]["aggregate_uncorrected"] = 2
    past = copy.deepcopy(gpu()["ecc"])
    past["aggregate_uncorrected"] = 1
    v = view([gpu(0, ecc=ecc), gpu(1, ecc=past), gpu(2)])
    assert run(gpu_health.ecc_uncorrectable, v) == [("gpu.ecc.uncorrectable", "fail", "GPU0 (0000:18:00.0)"),
                                                    ("gpu.ecc.uncorrectable", "warn", "GPU1 (0000:19:00.0)")]
    assert "SRAM 2" in next(iter(gpu_health.ecc_uncorrectable(v))).message


def test_sram_correctable_threshold() -> None:
    ecc = copy.deepcopy(gpu()["ecc"])
    ecc["locations"]["sram"]["aggregate_corrected"] = gpu_health.SRAM_CORRECTED_WARN
    below = copy.deepcopy(ecc)
    below["locations"]["sram"]["aggregate_corrected"] = gpu_health.SRAM_CORRECTED_WARN - 1
    v = view([gpu(0, ecc=ecc), gpu(1, ecc=below)])
    assert run(gpu_health.ecc_sram_threshold, v) == [("gpu.ecc.sram_threshold", "warn", "GPU0 (0000:18:00.0)")]


def test_only_hardware_slowdown_reasons_are_judged() -> None:
    v = view([gpu(0, clock_event_reason_names=["sw_power_cap", "applications_clocks", "gpu_idle"]),
              gpu(1, clock_event_reason_names=["hw_power_brake"]), gpu(2, clock_event_reason_names=None)])
    assert run(gpu_health.clocks_slowdown, v) == [("gpu.clocks.slowdown", "warn", "GPU1 (0000:19:00.0)")]


@pytest.mark.parametrize(("reasons", "severity"), [
    (["hw_thermal"], "fail"), (["hw_slowdown", "hw_thermal"], "fail"), (["hw_thermal", "hw_power_brake"], "fail"),
    (["hw_slowdown"], "warn"), (["hw_power_brake"], "warn"), (["hw_slowdown", "hw_power_brake"], "warn"),
    (["sw_thermal"], None), (["sw_thermal", "sw_power_cap"], None)])
def test_hw_thermal_slowdown_is_a_cooling_fault(reasons: list[str], severity: str | None) -> None:
    """The hardware halving the clocks for heat fails the host (bench/precision.py planted it at
    Llama 3's thermal rate and found every such host only degraded); the driver's own thermal
    management (sw_thermal) is no finding, the chassis's slowdown signal alone a warning."""
    v = view([gpu(0, clock_event_reason_names=reasons)])
    want = [("gpu.clocks.slowdown", severity, "GPU0 (0000:18:00.0)")] if severity else []
    assert run(gpu_health.clocks_slowdown, v) == want


def test_power_limit_below_the_default() -> None:
    v = view([gpu(0, power_limits={"limit_w": 450.0, "default_limit_w": 700.0, "enforced_limit_w": 450.0}),
              gpu(1, power_limits={"limit_w": 700.0, "default_limit_w": 700.0, "enforced_limit_w": 500.0}),
              gpu(2, power_limits={"limit_w": 690.0, "default_limit_w": 700.0, "enforced_limit_w": 690.0}),
              gpu(3, power_limits={"limit_w": None, "default_limit_w": 700.0, "enforced_limit_w": None})])
    assert run(gpu_health.power_limit_low, v) == [("gpu.power.limit_low", "warn", "GPU0 (0000:18:00.0)"),
                                                  ("gpu.power.limit_low", "warn", "GPU1 (0000:19:00.0)")]


def test_retired_pages_pending_asks_for_a_reset() -> None:
    v = view([gpu(0, retired_pages_pending=True), gpu(1, retired_pages_pending=False)])
    assert run(gpu_health.reset_required, v) == [("gpu.reset_required", "warn", "GPU0 (0000:18:00.0)")]


def test_pcie_replays_are_a_rate_within_one_boot() -> None:
    first = view([gpu(0, pcie_replays=1200)])
    assert run(gpu_health.pcie_replays, first) == []  # cumulative: no absolute judgement
    later = view([gpu(0, pcie_replays=1250)], previous=copy.deepcopy(first.facts))
    [f] = gpu_health.pcie_replays(later)
    assert f.actual == {"previous": 1200, "now": 1250} and "50" in f.message
    rebooted = view([gpu(0, pcie_replays=1250)], boot="b2", previous=copy.deepcopy(first.facts))
    assert run(gpu_health.pcie_replays, rebooted) == []


def _nvlink(replay: int) -> dict[str, Any]:
    return {"gpus": [{"index": 0, "bus_id": "0000:18:00.0", "links": [
        {"link": 0, "errors": {"replay": replay, "recovery": 0, "crc_flit": 0, "crc_data": 0}},
        {"link": 1, "errors": {"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": None}}]}]}


def test_nvlink_error_counters_are_a_rate_within_one_boot() -> None:
    first = view([gpu(0)], nvlink=_nvlink(3))
    assert run(gpu_health.nvlink_errors, first) == []
    later = view([gpu(0)], nvlink=_nvlink(9), previous=copy.deepcopy(first.facts))
    [f] = gpu_health.nvlink_errors(later)
    assert f.actual == {"link 0 replay": 6}
    assert run(gpu_health.nvlink_errors, view([gpu(0)], boot="b2", nvlink=_nvlink(9),
                                              previous=copy.deepcopy(first.facts))) == []


def test_mixed_vbios_names_the_odd_gpu() -> None:
    v = view([gpu(0), gpu(1), gpu(2, vbios="96.00.74.00.0B")])
    [f] = software.vbios_mixed(v)
    assert f.subject == "GPU2 (0000:1a:00.0)" and f.expected == "96.00.99.00.01"
    assert list(software.vbios_mixed(view([gpu(0), gpu(1)]))) == []


def _host(driver: str, kernel: str = "5.15.0-1042-nvidia", fm: str | None = None) -> dict[str, Any]:
    return {"kernel": kernel, "driver": {"loaded": True, "version": driver},
            "board": {"model": "DGXH100", "bios_version": "1.1.3"},
            "fabric_manager": {"installed": True, "package": "nvidia-fabricmanager-550", "version": fm} if fm else None}


def test_version_outlier_against_peers() -> None:
    fleet = [view([gpu(0)], name=f"h{i}", host=_host("550.54.15")) for i in range(3)]
    fleet.append(view([gpu(0)], name="odd", host=_host("550.90.07", kernel="5.15.0-1050-nvidia")))
    found = sorted((f.host, f.subject, f.actual) for f in software.version_outlier(fleet))
    assert found == [("odd", "NVIDIA driver", "550.90.07"), ("odd", "kernel", "5.15.0-1050-nvidia")]
    assert list(software.version_outlier(fleet[2:])) == []  # two hosts: no norm
    # another version in support is a note, not a fault of the host (bench/precision.py: in-support
    # drivers and another VBIOS degraded 123 of 1,000 healthy hosts); driver_min fails what is not
    assert {f.severity.value for f in software.version_outlier(fleet)} == {"info"}


def test_an_inforom_image_outlier_against_peers_and_not_judged_without_the_reading() -> None:
    fleet = [view([gpu(i, inforom_image="G520.0200.00.05") for i in range(2)], name=f"h{i}",
                  host=_host("550.54.15")) for i in range(3)]
    fleet.append(view([gpu(i, inforom_image="G520.0200.00.03") for i in range(2)], name="odd",
                      host=_host("550.54.15")))
    [f] = software.version_outlier(fleet)
    assert (f.host, f.subject, f.expected, f.actual) == ("odd", "InfoROM image", "G520.0200.00.05",
                                                          "G520.0200.00.03")
    assert f.evidence[0] == "gpus.list.inforom_image"
    # a recording of an older probe (no InfoROM reading) is not an outlier of anything
    older = [view([gpu(0)], name=f"h{i}", host=_host("550.54.15")) for i in range(4)]
    assert list(software.version_outlier(older)) == []


def test_fabric_manager_must_match_the_driver_on_nvswitch_systems() -> None:
    nvs = {"nvswitches": [{"bus_id": "0000:05:00.0"}]}
    bad = view([gpu(0)], host=_host("550.54.15", fm="550.90.07"), pcie=nvs)
    [f] = software.fabric_manager_version(bad)
    assert (f.id, f.severity.value, f.expected, f.actual) == ("nvlink.fabric_manager.version", "fail",
                                                              "550.54.15", "550.90.07")
    assert list(software.fabric_manager_version(view([gpu(0)], host=_host("550.54.15", fm="550.54.15"),
                                                      pcie=nvs))) == []
    assert list(software.fabric_manager_version(view([gpu(0)], host=_host("550.54.15", fm="550.90.07")))) == []


def _fab(cluster: str, clique: int, state: str = "completed") -> dict[str, Any]:
    return {"state": state, "status": "SUCCESS", "clique_id": clique, "cluster_uuid": cluster}


def test_nvlink_domain_on_one_host_and_across_the_fleet() -> None:
    from orchestrator.verdict.checks import nvlink_domain

    a, zero = "a" * 32, "0" * 32
    single = view([gpu(i, fabric=_fab(zero, 0)) for i in range(4)])  # single-node NVSwitch system
    assert list(nvlink_domain.host_domain(single)) == []
    mixed = view([gpu(0, fabric=_fab(a, 7)), gpu(1, fabric=_fab(a, 7)), gpu(2, fabric=_fab(a, 3)),
                  gpu(3, fabric=_fab(zero, 0)), gpu(4, fabric=_fab(a, 9, state="in_progress"))])
    assert [f.subject for f in nvlink_domain.host_domain(mixed)] == ["GPU2 (0000:1a:00.0)", "GPU3 (0000:1b:00.0)"]
    rack = [view([gpu(0, fabric=_fab(a, 7))], name=f"n{i}") for i in range(3)]
    rack.append(view([gpu(0, fabric=_fab(a, 4))], name="stray"))
    assert [(f.host, f.actual) for f in nvlink_domain.fleet_domains(rack)] == [("stray", 4)]
