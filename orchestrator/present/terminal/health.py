"""`--show kmsg` and `--show nic`: the kernel-log events and the NIC ports of one host."""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from orchestrator.facts.model import Facts, KmsgFacts, NicFacts
from orchestrator.present.terminal.text import clean
from orchestrator.verdict.device_health import HostDevices, without_verdict


def _q(v: Any) -> str:
    return "?" if v is None else clean(v)


def render_kmsg(kmsg: KmsgFacts, host: str = "", facts: Facts | None = None,
                width: int | None = None) -> str:
    if not kmsg.get("readable"):
        return f"kernel log not readable: {clean(kmsg.get('unreadable_reason'), 300)}"
    events = kmsg.get("events") or []
    head = (f"kernel log via {_q(kmsg.get('source'))}, boot {_q(kmsg.get('boot_id'))}: "
            f"{len(events)} event(s) in {_q(kmsg.get('lines_scanned'))} line(s)"
            + (" (oldest matching lines dropped)" if kmsg.get("truncated") else ""))
    if not events:
        return head
    rows = []
    for e in events:
        t = e.get("t")
        rows.append([f"{t:.1f}" if isinstance(t, (int, float)) else "?", clean(e.get("kind")),
                     _q(e.get("bus_id") or e.get("device")), "" if e.get("code") is None else e.get("code"),
                     clean(e.get("action") or e.get("severity") or e.get("subtype") or ""),
                     clean(e.get("text"), 90)])
    return head + "\n" + tabulate(rows, headers=["t (s)", "kind", "device", "code", "action", "text"],
                                   disable_numparse=True)  # "93297.0" stays as the log has it


def render_nic(nic: NicFacts, host: str = "", facts: Facts | None = None,
               width: int | None = None, devices: HostDevices | None = None) -> str:
    """`devices`: the verdict on each port and adapter (verdict/device_health.py), shown, not decided."""
    devices = devices if devices is not None else without_verdict()
    rows = []
    for d in nic.get("devices") or []:
        for p in d.get("ports") or []:
            errs = sum(v for k, v in (p.get("counters") or {}).items() if "err" in k or "discards" in k)
            rows.append([clean(d.get("name")), p.get("port"), _q(d.get("bus_id")), _q(p.get("link_layer")),
                         _q(p.get("state")), _q(p.get("phys_state")), _q(p.get("rate_gbps")),
                         _q(d.get("fw_ver")), errs, clean(p.get("netdev")),
                         devices.nic_port(d.get("name"), p.get("port"), d.get("bus_id")).text()])
    out = []
    if rows:
        out.append(tabulate(rows, headers=["HCA", "port", "PCI", "link layer", "state", "phys", "Gb/s",
                                           "firmware", "errors", "netdev", "health"]))
    elif not nic.get("infiniband_present"):
        out.append("no /sys/class/infiniband (no RDMA devices)")
    nets = [[clean(n.get("name")), _q(n.get("bus_id")), _q(n.get("driver")), _q(n.get("operstate")),
             _q(n.get("speed_mbps")), _q(n.get("carrier_changes")), devices.nic(None, n.get("bus_id")).text()]
            for n in nic.get("netdevs") or []]
    if nets:
        out.append(tabulate(nets, headers=["interface", "PCI", "driver", "oper", "Mb/s", "carrier changes",
                                           "health"]))
    return "\n\n".join(out) or "no NIC ports"
