"""NIC port checks (verdict/checks/nic.py): expectations, peers, counters between runs, firmware."""

from __future__ import annotations

import copy
from typing import Any

from orchestrator.verdict.checks import nic
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.expectations import Expectations


def port(state: str = "ACTIVE", phys: str = "LinkUp", rate: float = 400.0, **counters: int) -> dict[str, Any]:
    return {"port": 1, "link_layer": "InfiniBand", "state": state, "phys_state": phys, "rate_gbps": rate,
            "rate": f"{rate:g} Gb/sec", "netdev": None,
            "counters": {"symbol_error": 0, "link_downed": 0, "port_rcv_errors": 0, **counters}, "hw_counters": {}}


def host(name: str, ports: list[dict[str, Any]], fw: str = "28.39.1002", boot: str = "b1",
         expect: Expectations | None = None, previous: dict[str, Any] | None = None) -> HostView:
    devices = [{"name": f"mlx5_{i}", "bus_id": f"0000:{0x19 + i:02x}:00.0", "hca_type": "MT4129",
                "board_id": "MT_0000000838", "fw_ver": fw, "node_guid": None, "driver": "mlx5_core", "ports": [p]}
               for i, p in enumerate(ports)]
    facts = {"nic": {"devices": devices, "netdevs": [], "infiniband_present": True}, "kmsg": {"boot_id": boot}}
    return HostView(name=name, facts=facts, outcomes={"nic": "ok"}, expect=expect or Expectations(), previous=previous)


def ids(findings: Any) -> list[tuple[str, str, str, str]]:
    return sorted((f.id, f.host, f.severity.value, f.subject.split(" (")[0]) for f in findings)


def test_port_down_against_the_expectation() -> None:
    v = host("h1", [port(), port("DOWN", "Disabled")], expect=Expectations(nic_ports_up=True))
    assert ids(nic.port_down(v)) == [("nic.port.down", "h1", "fail", "mlx5_1 port 1")]
    assert list(nic.port_down(host("h1", [port("DOWN", "Polling")]))) == []  # no expectation: peers judge


def test_rate_against_the_expectation() -> None:
    v = host("h1", [port(rate=200.0), port()], expect=Expectations(nic_rate_gbps=400))
    assert ids(nic.rate_low(v)) == [("nic.port.rate_low", "h1", "fail", "mlx5_0 port 1")]


def test_peers_name_the_port_that_differs() -> None:
    fleet = [host(f"h{i}", [port(), port()]) for i in range(3)]
    fleet.append(host("slow", [port(), port(rate=100.0)]))
    fleet.append(host("dark", [port("DOWN", "Polling"), port()]))
    assert ids(nic.peer_ports(fleet)) == [("nic.port.down", "dark", "warn", "mlx5_0 port 1"),
                                          ("nic.port.rate_low", "slow", "warn", "mlx5_1 port 1")]
    assert list(nic.peer_ports(fleet[:1] + fleet[3:4])) == []  # two hosts that differ: neither is the norm
    strict = [host(f"h{i}", [port(), port()], expect=Expectations(nic_ports_up=True)) for i in range(3)]
    strict.append(host("dark", [port("DOWN", "Polling"), port()], expect=Expectations(nic_ports_up=True)))
    assert list(nic.peer_ports(strict)) == []  # the expectation judges (port_down), not the peers


def test_firmware_outlier_across_the_fleet() -> None:
    fleet = [host(f"h{i}", [port()]) for i in range(3)] + [host("old", [port()], fw="28.33.0800")]
    assert ids(nic.firmware_outlier(fleet)) == [("nic.firmware.outlier", "old", "warn", "mlx5_0")]


def test_error_counters_are_judged_as_growth_within_one_boot() -> None:
    before = host("h1", [port(symbol_error=10)])
    prev = copy.deepcopy(before.facts)
    same_boot = host("h1", [port(symbol_error=25, link_downed=1)], previous=prev)
    [grown] = nic.port_errors(same_boot)
    assert grown.actual == {"symbol_error": 15, "link_downed": 1} and "previous run" in grown.message
    rebooted = host("h1", [port(symbol_error=25)], boot="b2", previous=prev)
    assert list(nic.port_errors(rebooted)) == []  # another boot: counters are not comparable
    reloaded = host("h1", [port(symbol_error=3)], previous=prev)
    assert list(nic.port_errors(reloaded)) == []  # went backwards: the driver reloaded
    first_run = host("h1", [port(symbol_error=25)])
    assert list(nic.port_errors(first_run)) == []  # no previous run: cumulative counts prove nothing


def test_counters_where_any_count_is_a_fault_need_no_history() -> None:
    v = host("h1", [port(local_link_integrity_errors=2)])
    [f] = nic.port_errors(v)
    assert f.actual == {"local_link_integrity_errors": 2}


def test_gdr_with_the_expectation() -> None:
    def v(loaded: bool, kernel: str) -> HostView:
        h = host("h1", [port()], expect=Expectations(gdr=True))
        h.facts["nic"]["gdr"] = {"peermem_loaded": loaded, "module": "nvidia_peermem" if loaded else None,
                                 "memory_peers": None}
        h.facts["gpus"] = {"list": [{"index": 0, "bus_id": "0000:18:00.0"}]}
        h.facts["host"] = {"kernel": kernel}
        return h

    assert list(nic.gdr_unavailable(v(True, "4.18.0-513.el8"))) == []
    [old] = nic.gdr_unavailable(v(False, "4.18.0-513.el8"))
    assert (old.severity.value, old.kind.value) == ("fail", "fault")
    [new] = nic.gdr_unavailable(v(False, "5.15.0-1042-nvidia"))
    assert (new.severity.value, new.kind.value) == ("warn", "unknown") and "DMA-BUF" in new.message
    no_expect = v(False, "4.18.0")
    no_expect.expect = Expectations()
    assert list(nic.gdr_unavailable(no_expect)) == []
