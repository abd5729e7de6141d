"""A realistic sample fleet.json for report tests.

Three topology classes (8x H100 SXM behind NVSwitches, 4x A100 PCIe with NV12 bridge pairs, a VM
with MIG slices), one outlier (a NIC moved under a GPU's PCIe switch), a down NVLink link, a
downgraded PCIe link, an unreachable host, and findings of every severity and kind.

`hostile=PAYLOAD` writes PAYLOAD into every host-controlled string (hostnames, addresses, groups,
GPU names, board strings, probe errors, finding text) so escaping can be tested end to end.

The facts shapes follow the section specs (docs/facts-*.md of the pcie, gpus/nvlink/topology and
p2p owners); `orchestrator/present/report/model.py` is the one place that reads them.
"""

from __future__ import annotations

import copy
import zlib
from typing import Any

H100_GPUS = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
             "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
H100_NVSWITCHES = ["0000:05:00.0", "0000:06:00.0", "0000:07:00.0", "0000:08:00.0"]
# DGX H100 wiring: 18 links per GPU spread 5/4/4/5 over the four NVSwitches.
H100_LINKS_PER_SWITCH = [5, 4, 4, 5]
A100_GPUS = ["0000:17:00.0", "0000:31:00.0", "0000:b1:00.0", "0000:ca:00.0"]
VM_GPUS = ["0000:00:05.0", "0000:00:06.0"]


def _stable(text: str) -> int:
    """A hash that does not change between interpreter runs (str hash is salted)."""
    return zlib.crc32(text.encode())


def _s(hostile: str | None, text: str) -> str:
    """A host-controlled string, with the payload wrapped around it when testing escaping."""
    return text if hostile is None else hostile + text + hostile


def _link(gen: int, width: int, max_gen: int, max_width: int) -> dict[str, Any]:
    speeds = {1: "2.5 GT/s", 2: "5.0 GT/s", 3: "8.0 GT/s", 4: "16.0 GT/s", 5: "32.0 GT/s"}
    return {"gen_current": gen, "gen_max": max_gen, "speed_current": speeds[gen], "speed_max": speeds[max_gen],
            "width_current": width, "width_max": max_width}


def _host_facts(hostile: str | None, board: str, bios: str, driver: str, virt: str | None) -> dict[str, Any]:
    """facts["host"] as normalize/host.py writes it (docs/facts-host.md)."""
    return {
        "hostname": _s(hostile, "node"),
        "os": _s(hostile, "Ubuntu 22.04.4 LTS"),
        "kernel": "5.15.0-105-generic",
        "board": {
            "system_vendor": _s(hostile, board.split()[0]),
            "product": _s(hostile, board),
            "vendor": _s(hostile, board.split()[0]),
            "model": _s(hostile, board),
            "bios_vendor": _s(hostile, "American Megatrends International, LLC."),
            "bios_version": _s(hostile, bios),
            "bios_date": "03/12/2024",
            "system_serial": {"unknown": "needs root"},
        },
        "virtualization": {"virtualized": virt is not None, "hypervisor": virt},
        "driver": {"loaded": True, "version": driver},
    }


def _gpu(hostile: str | None, index: int, bus: str, name: str, mem_gib: int, link: dict[str, Any],
         serial: str, mig: bool = False) -> dict[str, Any]:
    return {
        "index": index, "bus_id": bus, "uuid": f"GPU-{index + 0x5A000000:08x}-1111-2222-3333-{_stable(bus):012x}",
        "name": _s(hostile, name), "model": None, "serial": _s(hostile, serial),
        "board_part_number": _s(hostile, "692-2G520-0200-000"), "vbios": _s(hostile, "96.00.74.00.01"),
        "memory_total_bytes": mem_gib * 2**30, "memory_used_bytes": 0,
        "mig": {"current": mig, "pending": mig,
                "instances": [{"index": i, "uuid": f"MIG-{i}", "name": _s(hostile, "1g.10gb"),
                               "memory_total_bytes": 10200547328} for i in range(2)] if mig else []},
        "virtualization_mode": "passthrough" if mig else "none",
        "pcie": dict(link, gen_gpu_max=link["gen_max"]),
        "numa_node": None, "numa_node_unknown": "NOT_SUPPORTED", "cpu_affinity": "0-55",
        "temperature_c": 33 + index, "fans": None, "fans_unknown": "NOT_SUPPORTED", "power_w": 72.5 + index,
        "ecc": {"mode_current": True, "volatile_uncorrected": 0, "aggregate_uncorrected": 0, "aggregate_corrected": 0},
        "lost": False, "unknown": {"fans": _s(hostile, "NOT_SUPPORTED")},
    }


def _gpus_section(gpus: list[dict[str, Any]], driver: str, levels: list[list[str]]) -> dict[str, Any]:
    return {"driver_version": driver, "cuda_driver_version": "12.4", "count": len(gpus),
            "order": [g["bus_id"] for g in gpus], "list": gpus, "levels": levels,
            "p2p": {"read": [["X" if a == b else "OK" for b in range(len(gpus))] for a in range(len(gpus))]},
            "mig_enabled_any": any(g["mig"]["current"] for g in gpus), "virtualized": False}


def _pci(bdf: str, kind: str, parent: str | None, link: dict[str, Any] | None, numa: int | None, *,
         port_type: str = "endpoint", family: str | None = None, label: str | None = None,
         switch: str | None = None) -> dict[str, Any]:
    return {"bdf": bdf, "vendor": "0x10de" if kind in ("gpu", "nvswitch") else "0x15b3", "device": "0x2330",
            "class": "0x030200", "kind": kind, "family": family, "label": label,
            "netdevs": [label] if kind == "nic" and label else [], "rdma": label if kind == "nic" else None,
            "driver": None, "numa": numa, "parent": parent, "port_type": port_type, "switch": switch,
            "link": link, "acs": None, "vf": False}


def _topology(labels: list[str], buses: list[str], matrix: list[list[str]]) -> dict[str, Any]:
    devices = [{"name": lab, "kind": "gpu" if lab.startswith("GPU") else "nic", "bus_id": bus}
               for lab, bus in zip(labels, buses)]
    return {"devices": devices, "matrix": matrix, "source": [["pcie"] * len(labels) for _ in labels]}


def _h100_host(name: str, hostile: str | None, *, down_link: tuple[int, int] | None = None,
               downgraded_gpu: int | None = None, nic_under_gpu_switch: bool = False,
               slow_pair_gpu: int | None = None) -> dict[str, Any]:
    gpus = []
    for i, bus in enumerate(H100_GPUS):
        link = _link(4, 8, 5, 16) if i == downgraded_gpu else _link(5, 16, 5, 16)
        gpus.append(_gpu(hostile, i, bus, "NVIDIA H100 80GB HBM3", 80, link, f"16523220{_stable(name) % 1000 * 10 + i:05d}"))
    # NVLink: every GPU's 18 links go to the four NVSwitches, 5/4/4/5.  NVML cannot name the far
    # end of a link that is down, as on real hosts.
    nvl_gpus = []
    for i, bus in enumerate(H100_GPUS):
        links = []
        n = 0
        for s, count in enumerate(H100_LINKS_PER_SWITCH):
            for _ in range(count):
                down = down_link == (i, n)
                links.append({"link": n, "state": "down" if down else "up", "version": "4.0",
                              "remote_bus_id": None if down else H100_NVSWITCHES[s],
                              "remote_type": None if down else "nvswitch", "p2p_supported": not down,
                              "errors": {"replay": 0, "recovery": 3 if down else 0, "crc_flit": 0, "crc_data": 0}})
                n += 1
        up = sum(1 for x in links if x["state"] == "up")
        nvl_gpus.append({"index": i, "bus_id": bus, "uuid": gpus[i]["uuid"], "links_total": 18, "links_up": up,
                         "inactive": [x["link"] for x in links if x["state"] != "up"], "version": "4.0",
                         "links": links, "unknown": {}})
    nvlink = {"supported": True, "order": list(H100_GPUS), "gpus": nvl_gpus, "pairs": [],
              "nvswitches": [{"bus_id": b, "links": sum(1 for g in nvl_gpus for x in g["links"] if x["remote_bus_id"] == b),
                              "gpus": list(H100_GPUS)} for b in H100_NVSWITCHES],
              "nv": [[None if a == b else 18 for b in range(8)] for a in range(8)],
              "links_up_total": sum(g["links_up"] for g in nvl_gpus), "links_total": 144}
    # PCIe: four root ports, each with a Gen5 switch (upstream port + downstream ports) holding
    # two GPUs; NICs on their own root ports, except on the outlier where NIC1 sits under the
    # switch of GPU2/GPU3.  NVSwitches hang off a root port of their own.
    devices: list[dict[str, Any]] = []
    nics = ["0000:1b:00.0", "0000:3d:00.0", "0000:9d:00.0", "0000:be:00.0"]
    uplinks = []
    switches = []
    for r in range(4):
        numa = 0 if r < 2 else 1
        base = 0x15 + r * 0x20
        rp, up = f"0000:{base:02x}:01.0", "0000:%02x:00.0" % (base + 1)
        devices.append(_pci(rp, "root_port", None, _link(5, 16, 5, 16), numa, port_type="root_port", family="Intel"))
        devices.append(_pci(up, "switch_port", rp, _link(5, 16, 5, 16), numa, port_type="upstream_port",
                            family=_s(hostile, "Broadcom PEX")))
        downs = []
        members = [H100_GPUS[2 * r], H100_GPUS[2 * r + 1]]
        if nic_under_gpu_switch and r == 1:
            members.append(nics[r])
        for k, dev in enumerate(members):
            dp = f"0000:{base + 2:02x}:{k:02x}.0"
            downs.append(dp)
            devices.append(_pci(dp, "switch_port", up, _link(5, 16, 5, 16), numa, port_type="downstream_port",
                                family="Broadcom PEX", switch=up))
            if dev in H100_GPUS:
                devices.append(_pci(dev, "gpu", dp, gpus[H100_GPUS.index(dev)]["pcie"], numa, family="NVIDIA", switch=up))
            else:
                devices.append(_pci(dev, "nic", dp, _link(5, 16, 5, 16), numa, family="ConnectX",
                                    label=_s(hostile, f"mlx5_{r}"), switch=up))
        switches.append({"upstream": up, "parent": rp, "vendor": "0x1000", "device": "0xc030",
                         "family": "Broadcom PEX", "levels": 1, "downstream": downs})
        uplinks.append({"id": up, "type": "switch", "port": rp, "gpus": members[:2],
                        "nics": members[2:], "nvme": [], "nvswitches": [], "other": []})
        if not (nic_under_gpu_switch and r == 1):
            nic_rp = f"0000:{base:02x}:03.0"
            devices.append(_pci(nic_rp, "root_port", None, _link(5, 16, 5, 16), numa, port_type="root_port"))
            devices.append(_pci(nics[r], "nic", nic_rp, _link(5, 16, 5, 16), numa, family="ConnectX",
                                label=_s(hostile, f"mlx5_{r}")))
            uplinks.append({"id": nic_rp, "type": "root_port", "port": nic_rp, "gpus": [], "nics": [nics[r]],
                            "nvme": [], "nvswitches": [], "other": []})
    nvs_rp = "0000:04:01.0"
    devices.append(_pci(nvs_rp, "root_port", None, _link(5, 8, 5, 8), 0, port_type="root_port"))
    for b in H100_NVSWITCHES:
        devices.append(_pci(b, "nvswitch", nvs_rp, _link(5, 2, 5, 2), 0, family="NVIDIA"))
    devices.append(_pci("0000:00:1f.4", "other", None, None, 0, family="Intel"))  # SMBus: not drawn
    downgraded = [{"bdf": d["bdf"], "kind": d["kind"], **d["link"]} for d in devices if d["link"] and
                  (d["link"]["gen_current"] < d["link"]["gen_max"] or d["link"]["width_current"] < d["link"]["width_max"])]
    labels = [f"GPU{i}" for i in range(8)] + [f"NIC{i}" for i in range(4)]
    socket = [i // 4 for i in range(8)] + [n // 2 for n in range(4)]
    matrix = []
    for a in range(12):
        row = []
        for b in range(12):
            if a == b:
                row.append("X")
            elif a < 8 and b < 8:
                row.append("NV18")
            elif nic_under_gpu_switch and {a, b} in ({9, 2}, {9, 3}):
                row.append("PIX")
            else:
                row.append("NODE" if socket[a] == socket[b] else "SYS")
        matrix.append(row)
    pcie_levels = [[c if not c.startswith("NV") else ("PIX" if a // 2 == b // 2 else "NODE")
                    for b, c in enumerate(row)] for a, row in enumerate(matrix)]
    order = list(H100_GPUS) + nics
    return {
        "name": _s(hostile, name), "address": _s(hostile, f"10.0.1.{_stable(name) % 200 + 10}"),
        "groups": [_s(hostile, "h100"), "gpu"], "outcome": "ok", "reason": None,
        "probes": {p: {"outcome": "ok", "reason": None, "duration_s": 0.4, "probe_version": "1", "retried": False}
                   for p in ("host", "nvml", "nvlink", "pcie", "p2p")},
        "facts": {
            "host": _host_facts(hostile, "NVIDIA DGXH100", "01.02.03", "550.54.15", None),
            "gpus": _gpus_section(gpus, "550.54.15", [r[:8] for r in pcie_levels[:8]]),
            "nvlink": nvlink,
            "pcie": {"config_access": "full", "needs_root": [], "devices": devices, "tree": [],
                     "gpus": sorted(H100_GPUS), "nics": sorted(nics), "nvswitches": list(H100_NVSWITCHES), "nvme": [],
                     "switches": switches, "uplinks": uplinks,
                     "levels": {"order": order, "labels": labels,
                                "nic_names": [_s(hostile, f"mlx5_{i}") for i in range(4)], "matrix": pcie_levels},
                     "downgraded": downgraded, "acs": []},
            "topology": _topology(labels, order, matrix),
            "p2p": _p2p(H100_GPUS, [g["name"] for g in gpus], 370.0, 52.0, slow=slow_pair_gpu),
        },
        "fingerprint": "h100-nic-pix" if nic_under_gpu_switch else "3f9a1c27d0b4",
        "class": "dgx-h100-8gpu",
    }


def _p2p(buses: list[str], names: list[str], nvlink_gbps: float, pcie_gbps: float, slow: int | None = None,
         nv_pairs: list[tuple[int, int]] | None = None) -> dict[str, Any]:
    """facts["p2p"] as orchestrator/facts/normalize/p2p.py writes it: matrices in CUDA ordinal order,
    the diagonal holding the device-local copy.  `nv_pairs`: only these pairs are NVLinked (None:
    all are); a `slow` GPU copies at a third of the NVLink figure."""
    n = len(buses)
    ce: list[list[float | None]] = []
    pairs = []
    for a in range(n):
        row: list[float | None] = []
        for b in range(n):
            if a == b:
                row.append(1450.0 + a)
                continue
            linked = nv_pairs is None or (a, b) in nv_pairs or (b, a) in nv_pairs
            base = nvlink_gbps if linked else pcie_gbps
            value = round(base * 0.31 + a * 0.7, 1) if slow is not None and slow in (a, b) else \
                round(base - (a * 3 + b) % 7 * base / 300, 1)
            row.append(value)
            pairs.append({"src": a, "dst": b, "src_bus_id": buses[a], "dst_bus_id": buses[b], "can_access_peer": True,
                          "peer_enabled": True, "peer_error": None, "staged": False, "ce_gbps": value,
                          "sm_read_gbps": value, "latency_us": 2.1, "bidir_gbps": None, "verified": True})
        ce.append(row)
    gpus = [{"index": i, "bus_id": bus, "name": names[i], "model": None, "status": "ok", "error": None,
             "h2d_gbps": 52.1, "d2h_gbps": 51.7, "local_ce_gbps": ce[i][i], "local_sm_gbps": ce[i][i],
             "verified": True} for i, bus in enumerate(buses)]
    measured = [p["ce_gbps"] for p in pairs]
    return {"order": list(buses), "gpus": gpus, "pairs": pairs,
            "matrices": {"ce_gbps": ce, "can_access_peer": [[None if a == b else True for b in range(n)] for a in range(n)]},
            "summary": {"min_gbps": min(measured), "pairs_measured": len(measured)},
            "all_to_host": None, "mismatches": [], "complete": True}


def _a100_host(name: str, hostile: str | None, bridge_link_down: bool = False) -> dict[str, Any]:
    gpus = [_gpu(hostile, i, bus, "NVIDIA A100 80GB PCIe", 80, _link(4, 16, 4, 16), f"13240{i:07d}")
            for i, bus in enumerate(A100_GPUS)]
    nvl = []
    for i, bus in enumerate(A100_GPUS):
        peer = A100_GPUS[i ^ 1]
        # On the faulty host, link 11 of the GPU2<->GPU3 bridge is down; NVML still names the
        # far end (the bridge is there), so both ends list it.
        links = [{"link": n, "state": "down" if bridge_link_down and i >= 2 and n == 11 else "up", "version": "3.0",
                  "remote_bus_id": peer, "remote_type": "gpu"} for n in range(12)]
        up = sum(1 for x in links if x["state"] == "up")
        nvl.append({"index": i, "bus_id": bus, "links_total": 12, "links_up": up,
                    "inactive": [x["link"] for x in links if x["state"] != "up"], "version": "3.0",
                    "links": links, "unknown": {}})
    nvlink = {"supported": True, "order": list(A100_GPUS), "gpus": nvl, "nvswitches": [],
              "pairs": [{"a": A100_GPUS[0], "b": A100_GPUS[1], "links": 12}, {"a": A100_GPUS[2], "b": A100_GPUS[3], "links": 12}],
              "links_up_total": 48, "links_total": 48}
    devices = []
    for i, bus in enumerate(A100_GPUS):
        rp = "0000:%02x:01.0" % (int(bus[5:7], 16) - 1)
        devices.append(_pci(rp, "root_port", None, _link(4, 16, 4, 16), i // 2, port_type="root_port", family="AMD"))
        devices.append(_pci(bus, "gpu", rp, _link(4, 16, 4, 16), i // 2, family="NVIDIA"))
    devices.append(_pci("0000:41:01.0", "root_port", None, _link(4, 16, 4, 16), 0, port_type="root_port"))
    devices.append(_pci("0000:42:00.0", "nic", "0000:41:01.0", _link(4, 16, 4, 16), 0, family="ConnectX",
                        label=_s(hostile, "mlx5_0")))
    labels = ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0"]
    m = [["X", "NV12", "SYS", "SYS", "NODE"], ["NV12", "X", "SYS", "SYS", "NODE"],
         ["SYS", "SYS", "X", "NV12", "SYS"], ["SYS", "SYS", "NV12", "X", "SYS"],
         ["NODE", "NODE", "SYS", "SYS", "X"]]
    return {
        "name": _s(hostile, name), "address": _s(hostile, f"10.0.2.{_stable(name) % 200 + 10}"),
        "groups": [_s(hostile, "a100"), "gpu"], "outcome": "ok", "reason": None,
        "probes": {p: {"outcome": "ok", "reason": None, "duration_s": 0.3, "probe_version": "1", "retried": False}
                   for p in ("host", "nvml", "nvlink", "pcie", "p2p")},
        "facts": {
            "host": _host_facts(hostile, "Supermicro AS-4124GS-TNR", "2.6", "535.161.08", None),
            "gpus": _gpus_section(gpus, "535.161.08", [["X" if a == b else "SYS" for b in range(4)] for a in range(4)]),
            "nvlink": nvlink,
            "pcie": {"devices": devices, "uplinks": [], "switches": [], "downgraded": [],
                     "gpus": list(A100_GPUS), "nics": ["0000:42:00.0"]},
            "topology": _topology(labels, [*A100_GPUS, "0000:42:00.0"], m),
            "p2p": _p2p(A100_GPUS, [g["name"] for g in gpus], 255.0, 21.0, nv_pairs=[(0, 1), (2, 3)]),
        },
        "fingerprint": "a100-nv12-pairs", "class": "a100-pcie-4gpu",
    }


def _vm_host(name: str, hostile: str | None) -> dict[str, Any]:
    gpus = [_gpu(hostile, i, bus, "NVIDIA A100-SXM4-80GB", 80, _link(4, 16, 4, 16), f"1564520{i:06d}", mig=True)
            for i, bus in enumerate(VM_GPUS)]
    devices = [_pci("0000:00:00.0", "host_bridge", None, None, None, port_type="rc_integrated")]
    devices += [_pci(bus, "gpu", None, _link(4, 16, 4, 16), None, family="NVIDIA") for bus in VM_GPUS]
    return {
        "name": _s(hostile, name), "address": _s(hostile, "vm01.cloud.example"),
        "groups": ["rented"], "outcome": "failed", "reason": _s(hostile, "nvlink: NVML_ERROR_NOT_SUPPORTED under MIG"),
        "probes": {"host": {"outcome": "ok", "reason": None, "duration_s": 0.1, "probe_version": "1", "retried": False},
                   "nvml": {"outcome": "ok", "reason": None, "duration_s": 0.2, "probe_version": "1", "retried": False},
                   "nvlink": {"outcome": "failed", "reason": _s(hostile, "NVML_ERROR_NOT_SUPPORTED"), "duration_s": 0.1,
                              "probe_version": "1", "retried": True},
                   "pcie": {"outcome": "ok", "reason": None, "duration_s": 0.1, "probe_version": "1", "retried": False},
                   "p2p": {"outcome": "skipped", "reason": "MIG enabled", "duration_s": 0.0, "probe_version": "1",
                           "retried": False}},
        "facts": {
            "host": _host_facts(hostile, "QEMU Standard PC (i440FX + PIIX, 1996)", "1.16.3-debian", "550.90.07", "kvm"),
            "gpus": _gpus_section(gpus, "550.90.07", [["X", "PHB"], ["PHB", "X"]]),
            "pcie": {"devices": devices, "uplinks": [], "switches": [], "downgraded": [],
                     "virtual_platform": {"detected": True, "evidence": [_s(hostile, "QEMU host bridge")]}},
            "topology": _topology(["GPU0", "GPU1"], list(VM_GPUS), [["X", "PHB"], ["PHB", "X"]]),
        },
        "fingerprint": "vm-mig-2gpu", "class": "vm-a100-mig",
    }


def _finding(fid: str, severity: str, kind: str, host: str, subject: str, message: str, *, expected: Any = None,
             actual: Any = None, evidence: list[str] | None = None, hint: str = "") -> dict[str, Any]:
    return {"id": fid, "severity": severity, "kind": kind, "host": host, "subject": subject, "message": message,
            "expected": expected, "actual": actual, "evidence": evidence or [], "hint": hint}


def build_sample_fleet(hostile: str | None = None) -> dict[str, Any]:
    """The fixture fleet: 8 hosts, 3 classes, an outlier, an unreachable host, every severity and kind."""
    h = hostile
    hosts = [
        _h100_host("gpu01", h),
        _h100_host("gpu02", h, down_link=(3, 7), slow_pair_gpu=3),
        _h100_host("gpu03", h, downgraded_gpu=5),
        _h100_host("gpu04", h, nic_under_gpu_switch=True),
        _a100_host("a100-01", h),
        _a100_host("a100-02", h, bridge_link_down=True),
        _vm_host("vm01", h),
        {"name": _s(h, "gpu05"), "address": _s(h, "10.0.1.99"), "groups": [_s(h, "h100")], "outcome": "unreachable",
         "reason": _s(h, "ssh: connect to 10.0.1.99 port 22: No route to host"), "probes": {}, "facts": {},
         "fingerprint": None, "class": None},
    ]
    n = lambda x: _s(h, x)  # noqa: E731 - host names as they appear in findings
    findings = [
        _finding("nvlink.link.down", "fail", "fault", n("gpu02"), n("GPU3 (0000:5d:00.0) link 7"),
                 _s(h, "NVLink link 7 of GPU3 is down (17 of 18 links up)"), expected=18, actual=17,
                 evidence=["nvlink.gpus[3].links[7].state"], hint="Reseat or replace the GPU baseboard; check fabric manager."),
        _finding("p2p.bandwidth.low", "fail", "fault", n("gpu02"), n("GPU3->GPU0 (0000:5d:00.0 -> 0000:18:00.0)"),
                 _s(h, "P2P copy GPU3->GPU0 at 116.8 GB/s, 35% of the 335 GB/s floor"), expected=335.0, actual=116.8,
                 evidence=["p2p.matrices.ce_gbps[3][0]"], hint="Cross-check NVLink link state."),
        _finding("pcie.link.downgraded", "warn", "fault", n("gpu03"), n("GPU5 (0000:ab:00.0)"),
                 _s(h, "PCIe link of GPU5 runs at Gen4 x8, capable of Gen5 x16"), expected="Gen5 x16", actual="Gen4 x8",
                 evidence=["pcie.devices[0000:ab:00.0].link"], hint="Reseat the card; check the riser and BIOS link settings."),
        _finding("pcie.nic.shared_switch", "warn", "fault", n("gpu04"), n("NIC1 (0000:3d:00.0)"),
                 _s(h, "NIC1 sits under the PCIe switch of GPU2 and GPU3 (shared uplink)"), expected="own root port",
                 actual={"uplink": "0000:36:00.0", "gpus": ["0000:3a:00.0", "0000:5d:00.0"], "nics": ["0000:3d:00.0"]},
                 evidence=["pcie.uplink_groups"], hint="Compare the slot layout with the class."),
        _finding("fleet.class.outlier", "warn", "fault", n("gpu04"), n("topology"),
                 _s(h, "Topology differs from class dgx-h100-8gpu (3 peers)"), evidence=["fingerprint"]),
        _finding("nvlink.unavailable.mig", "info", "platform_limitation", n("vm01"), "GPU0 (0000:00:05.0)",
                 _s(h, "MIG is enabled: NVLink and P2P are not available to MIG instances"),
                 hint="Expected under MIG; disable MIG if P2P is needed."),
        _finding("host.virtualized", "info", "platform_limitation", n("vm01"), "host",
                 _s(h, "Host is a KVM guest: PCIe tree is synthetic"), actual="kvm"),
        _finding("host.dmi.serial_unknown", "info", "unknown", n("gpu01"), "DMI",
                 _s(h, "System serial needs root; run the play with become"), evidence=["host.dmi.product_serial"]),
        _finding("nvlink.link.down", "fail", "fault", n("a100-02"), n("GPU2 (0000:b1:00.0) link 11"),
                 _s(h, "NVLink bridge link 11 between GPU2 and GPU3 is down (11 of 12 links up)"), expected=12, actual=11,
                 evidence=["nvlink.gpus[2].links[11].state"], hint="Reseat the NVLink bridge."),
        _finding("nvml.ecc.unknown", "warn", "unknown", n("a100-02"), "GPU2 (0000:b1:00.0)",
                 _s(h, "ECC counters could not be read: NVML_ERROR_NO_PERMISSION"), hint="Run with sudo -n."),
        _finding("host.unreachable", "fail", "unknown", n("gpu05"), "host",
                 _s(h, "Host did not answer: ssh: connect to 10.0.1.99 port 22: No route to host"),
                 hint="Check the address and that sshd is running."),
        _finding("identity.gpu.uuid_duplicate", "fail", "fault", n("a100-01"), "GPU0 (0000:17:00.0)",
                 _s(h, "GPU UUID also reported by a100-02: the device list may be forged"),
                 evidence=["gpus.list[0].uuid"], hint="Ask the provider; compare nvidia-smi -q serials."),
    ]
    outcomes: dict[str, int] = {}
    for host in hosts:
        outcomes[host["outcome"]] = outcomes.get(host["outcome"], 0) + 1
    sev = {"fail": 0, "warn": 0, "info": 0}
    for f in findings:
        sev[f["severity"]] += 1
    classes = [
        {"name": "dgx-h100-8gpu", "fingerprint": "3f9a1c27d0b4",
         "members": [hosts[i]["name"] for i in range(4)],
         "outliers": [{"host": hosts[3]["name"], "differences": [_s(h, "NIC1 path to GPU2: PIX (class: PHB)"),
                                                                  _s(h, "NIC1 parent 0000:36:00.0 (class: root port)")]}]},
        {"name": "a100-pcie-4gpu", "fingerprint": "a100-nv12-pairs", "members": [hosts[4]["name"], hosts[5]["name"]],
         "outliers": []},
        {"name": "vm-a100-mig", "fingerprint": "vm-mig-2gpu", "members": [hosts[6]["name"]], "outliers": []},
    ]
    return {
        "schema_version": 1,
        "run": {"id": "20261130T001500Z-sample", "started": "2026-11-30T00:15:00Z", "finished": "2026-11-30T00:15:42Z",
                "inventory": ["inventories/lab.yaml"], "playbook": "playbooks/premigration.yml",
                "probes": ["host", "nvml", "nvlink", "pcie", "p2p"], "limit": None, "user": _s(h, "ops")},
        "summary": {"hosts": len(hosts), "outcomes": outcomes, "findings": sev},
        "hosts": hosts, "classes": classes, "findings": findings,
    }


def build_previous_fleet() -> dict[str, Any]:
    """Yesterday's run of the sample fleet: gpu02's link was up, gpu05 answered, a100-03 existed."""
    fleet = build_sample_fleet()
    prev = copy.deepcopy(fleet)
    prev["run"]["id"] = "20261129T001500Z-sample"
    prev["findings"] = [f for f in prev["findings"] if f["host"] not in ("gpu02", "gpu05")]
    for host in prev["hosts"]:
        if host["name"] == "gpu05":
            host.update(copy.deepcopy(fleet["hosts"][0]), name="gpu05")
    extra = copy.deepcopy(fleet["hosts"][4])
    extra["name"] = "a100-03"
    prev["hosts"].append(extra)
    return prev


def build_large_fleet(n_hosts: int = 2000, broken_every: int = 50) -> dict[str, Any]:
    """A big fleet made of the sample's hosts: every `broken_every`-th host carries gpu02's fault."""
    sample = build_sample_fleet()
    # Healthy members of the three classes (gpu01, a100-01, vm01 with its nvlink probe passing).
    templates = [copy.deepcopy(sample["hosts"][i]) for i in (0, 4, 6)]
    templates[2].update(outcome="ok", reason=None)
    templates[2]["probes"]["nvlink"].update(outcome="ok", reason=None)
    broken = sample["hosts"][1]
    hosts, findings = [], []
    classes: dict[str, dict[str, Any]] = {}
    for i in range(n_hosts):
        src = broken if i % broken_every == 0 else templates[i % len(templates)]
        host = copy.deepcopy(src)
        host["name"] = f"node{i:05d}"
        hosts.append(host)
        cls = classes.setdefault(host["class"], {"name": host["class"], "fingerprint": host["fingerprint"],
                                                 "members": [], "outliers": []})
        cls["members"].append(host["name"])
        if src is broken:
            for f in sample["findings"]:
                if f["host"] == "gpu02":
                    findings.append(dict(f, host=host["name"]))
    sev = {"fail": 0, "warn": 0, "info": 0}
    for f in findings:
        sev[f["severity"]] += 1
    outcomes: dict[str, int] = {}
    for host in hosts:
        outcomes[host["outcome"]] = outcomes.get(host["outcome"], 0) + 1
    return {"schema_version": 1, "run": dict(sample["run"], id="large"),
            "summary": {"hosts": n_hosts, "outcomes": outcomes, "findings": sev},
            "hosts": hosts, "classes": list(classes.values()), "findings": findings}
