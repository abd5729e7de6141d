"""Kernel-log checks (verdict/checks/health.py): Xid actions from the table, bursts, SXid, fallen off
the bus, AER thresholds, an unreadable log, and events of one boot reported once across runs."""

from __future__ import annotations

from typing import Any

from orchestrator.facts.normalize import kmsg
from orchestrator.verdict.checks import health
from orchestrator.verdict.checks.base import HostView

BOOT = "0b1e7c55-2f7e-4d6e-9a51-7b3c2d1e0f00"


def facts(*lines: tuple[float, str], boot: str = BOOT, readable: bool = True) -> dict[str, Any]:
    data = {"readable": readable, "source": "kmsg" if readable else None, "boot_id": boot,
            "attempts": [] if readable else [{"source": "kmsg", "error": "/dev/kmsg is readable by root only"}],
            "lines": [{"t": t, "msg": m} for t, m in lines]}
    return {"kmsg": dict(kmsg.normalize(data)),
            "gpus": {"list": [{"index": 3, "bus_id": "0000:2a:00.0"}, {"index": 5, "bus_id": "0000:9a:00.0"}]}}


def view(f: dict[str, Any], previous: dict[str, Any] | None = None, **kw: Any) -> HostView:
    return HostView(name="h1", facts=f, outcomes={"kmsg": "ok", "nvml": "ok"}, previous=previous, **kw)


def ids(findings: Any) -> list[tuple[str, str, str]]:
    return sorted((f.id, f.severity.value, f.subject) for f in findings)


XID79 = (73412.2203, "NVRM: Xid (PCI:0000:2a:00): 79, GPU has fallen off the bus.")
FALLEN = (73412.2204, "NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.")
XID13 = "NVRM: Xid (PCI:0000:9a:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e"


def test_xid_actions_from_the_table() -> None:
    f = facts(XID79, FALLEN, (10.0, "NVRM: Xid (PCI:0000:9a:00): 48, pid=7, name=python, DBE (0x1,0x2)"),
              (11.0, "NVRM: Xid (PCI:0000:9a:00): 45, pid=7, name=python, Ch 00000001 caused by previous Xid 48"),
              (12.0, "NVRM: Xid (PCI:0000:9a:00): 9999, something new"))
    found = list(health.gpu_xid(view(f)))
    assert ids(found) == [("gpu.xid", "fail", "GPU3 (0000:2a:00.0)"), ("gpu.xid", "fail", "GPU5 (0000:9a:00.0)"),
                          ("gpu.xid", "warn", "GPU5 (0000:9a:00.0)")]  # 45 (a follow-on) raises nothing
    by_code = {f.message.split(",")[0]: f for f in found}
    assert "reboot" in by_code["Xid 79"].hint and "reset" in by_code["Xid 48"].hint
    assert "does not know" in next(f.message for f in found if f.severity.value == "warn")
    assert ids(health.gpu_fallen_off_bus(view(f))) == [("gpu.fallen_off_bus", "fail", "GPU3 (0000:2a:00.0)")]


def test_application_xid_alone_is_info_and_a_burst_is_a_warning() -> None:
    one = list(health.gpu_xid(view(facts((5.0, XID13)))))
    assert ids(one) == [("gpu.xid", "info", "GPU5 (0000:9a:00.0)")]
    burst = list(health.gpu_xid(view(facts(*[(5.0 + i, XID13) for i in range(5)]))))
    assert ids(burst) == [("gpu.xid", "warn", "GPU5 (0000:9a:00.0)")]
    assert "repeated" in burst[0].message and burst[0].actual == {"count": 5, "new": 5}


def test_nvlink5_xid_severity_comes_from_the_line() -> None:
    nonfatal = "NVRM: Xid (PCI:0000:2a:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008)"
    fatal = "NVRM: Xid (PCI:0000:2a:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000)"
    assert list(health.gpu_xid(view(facts((1.0, nonfatal))))) == []
    assert ids(health.gpu_xid(view(facts((1.0, fatal))))) == [("gpu.xid", "fail", "GPU3 (0000:2a:00.0)")]


def test_an_event_seen_in_the_previous_run_of_the_same_boot_is_still_present() -> None:
    first = facts(XID79)
    second = facts(XID79, (80000.0, "NVRM: Xid (PCI:0000:9a:00): 48, pid=7, name=python, DBE"))
    found = {f.subject: f for f in health.gpu_xid(view(second, previous=first))}
    assert "still present" in found["GPU3 (0000:2a:00.0)"].message
    assert found["GPU3 (0000:2a:00.0)"].actual == {"count": 1, "new": 0}
    assert "in this boot" in found["GPU5 (0000:9a:00.0)"].message
    # a reboot in between: another boot id, so nothing of the previous run is "still" there
    rebooted = facts(XID79, boot="another-boot")
    again = list(health.gpu_xid(view(rebooted, previous=first)))
    assert again[0].actual == {"count": 1, "new": 1} and "still present" not in again[0].message
    assert health.split_new(second["kmsg"]["events"], health.previous_keys(second["kmsg"], first))[1] == \
        first["kmsg"]["events"]


def test_sxid_fatal_fails_and_non_fatal_warns() -> None:
    f = facts((1.0, "nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX Short Error Rate"),
              (2.0, "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 11001, Fatal, ingress invalid command"))
    assert ids(health.nvswitch_sxid(view(f))) == [("nvswitch.sxid", "fail", "NVSwitch 0000:05:00.0"),
                                                  ("nvswitch.sxid", "warn", "NVSwitch 0000:c3:00.0")]


def test_aer_uncorrected_fails_and_corrected_only_in_numbers() -> None:
    corrected = "pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"
    few = facts(*[(float(i), corrected) for i in range(3)])
    assert list(health.pcie_aer(view(few))) == []
    many = facts(*[(float(i), corrected) for i in range(health.AER_CORRECTED_MIN)])
    assert ids(health.pcie_aer(view(many))) == [("pcie.aer", "warn", "0000:00:1c.5")]
    fatal = facts((1.0, "pcieport 0000:17:01.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), "
                        "type=Transaction Layer, (Requester ID)"))
    assert ids(health.pcie_aer(view(fatal))) == [("pcie.aer", "fail", "0000:17:01.0")]


def test_unreadable_kernel_log_is_unknown_never_healthy() -> None:
    f = facts(readable=False)
    [finding] = health.kernel_log_unreadable(view(f))
    assert (finding.id, finding.kind.value, finding.severity.value) == ("host.kernel_log.unreadable", "unknown", "warn")
    assert "root only" in finding.message and "systemd-journal" in finding.hint
    assert list(health.gpu_xid(view(f))) == []  # nothing judged, nothing passed
    f["host"] = {"virtualization": {"container": "docker"}}
    [inside] = health.kernel_log_unreadable(view(f))
    assert inside.kind.value == "platform_limitation"


def test_checks_stay_silent_when_the_probe_did_not_run() -> None:
    f = facts(XID79)
    assert list(health.gpu_xid(HostView(name="h", facts=f, outcomes={"kmsg": "failed"}))) == []
    assert list(health.kernel_log_unreadable(HostView(name="h", facts={}, outcomes={"kmsg": "ok"}))) == []


def test_mlx5_events_name_their_device() -> None:
    f = facts((21.4, "mlx5_core 0000:01:00.0: mlx5_pcie_event:301:(pid 1203): Detected insufficient power on the "
                     "PCIe slot (27W)."),
              (30.0, "NETDEV WATCHDOG: ibp26s0 (mlx5_core): transmit queue 3 timed out"),
              (31.0, "mlx5_core 0000:19:00.0: poll_health:800:(pid 0): device's health compromised - reached miss count"),
              (22.0, "mlx5_core 0000:19:00.0: mlx5_pcie_event:299:(pid 1029): PCIe slot advertised sufficient power (75W)."))
    assert ids(health.nic_kernel_events(view(f))) == [("nic.kernel_event", "fail", "0000:19:00.0"),
                                                      ("nic.kernel_event", "warn", "0000:01:00.0"),
                                                      ("nic.kernel_event", "warn", "ibp26s0")]
