"""The text a simulated machine's tools print: `nvidia-smi nvlink -s` / `-c`, a `--query-gpu` CSV of
the GPUs' bus ids, `ibstat`, `ibstatus` and `dmesg`, for the import-vs-live tests.

Each tool answers from the same source as a probe: nvidia-smi from NVML (the `nvlink` probe's
data), ibstat and ibstatus from sysfs (the `nic` probe's), dmesg from /dev/kmsg (the `kmsg`
probe's).  So the text is rendered from that probe's data of the same machine (its demo
recording, or a run of the probe on the simulated machine), laid out as the published captures in
tests/fixtures/evidence print it (nvlink_s_i0_h100_sxm_18links_01.txt,
nvlink_s_3x_rtx_a6000_inactive_01.txt, nvlink_c_i0_h100_sxm_18links_01.txt, the ibstat/ibstatus
captures, dmesg_*.txt).  Pure: data in, text out.  What the source told the probe and the tool
does not print (remote ends, NVLink versions, error counters, PCI functions) is left out.
"""

from __future__ import annotations

from typing import Any

from orchestrator.present.terminal.topo import LEGEND

# The per-link speed `nvlink -s` prints, by NVLink version (as printed in the published captures:
# V100 25.781, A100 25.000, H100 26.562, GB200/B300 53.125; a 3.x bridge between workstation cards 14.062).
SPEED_BY_VERSION = {"2.0": "25.781", "2.2": "25.781", "3.0": "25.000", "3.1": "14.062", "4.0": "26.562",
                    "5.0": "53.125"}
ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"
# the probe's capability keys -> nvidia-smi's wording (the ones NVML's probe reads)
CAP_WORDS = {"p2p_supported": "P2P is supported", "sysmem_access": "Access to system memory supported",
             "p2p_atomics": "P2P atomics supported"}


def _gpus(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in data.get("gpus") or [] if isinstance(g, dict)]


def _header(g: dict[str, Any]) -> str:
    return f"GPU {g['index']}: {g.get('name')} (UUID: {g.get('uuid')})"


def _has_links(g: dict[str, Any]) -> bool:
    """nvidia-smi lists a GPU's links where NVML answered for them (no NVLink: no lines at all)."""
    return bool(g.get("links")) and (g.get("unknown") or {}).get("links") != "NOT_SUPPORTED"


def nvlink_status(data: dict[str, Any]) -> str:
    """`nvidia-smi nvlink -s`: a line per link, its speed or `<inactive>`; a GPU whose links are
    all down gets NVML's one-line message instead."""
    out: list[str] = []
    for g in _gpus(data):
        out.append(_header(g))
        if not _has_links(g):
            continue
        links = g["links"]
        if all(lk.get("state") == "down" for lk in links):
            out.append(ALL_INACTIVE)
            continue
        for lk in links:
            up = lk.get("state") == "up"
            value = f"{SPEED_BY_VERSION.get(str(lk.get('version')), '25.000')} GB/s" if up else "<inactive>"
            out.append(f"\t Link {lk['link']}: {value}")
    return "\n".join(out) + "\n"


def _yes(value: Any) -> str:
    return "true" if value else "false"


def nvlink_caps(data: dict[str, Any]) -> str:
    """`nvidia-smi nvlink -c`: a line per link and capability NVML answered (no states)."""
    out: list[str] = []
    for g in _gpus(data):
        out.append(_header(g))
        for lk in g["links"] if _has_links(g) else []:
            out += [f"\t Link {lk['link']}, {words}: {_yes(lk.get(key))}"
                    for key, words in CAP_WORDS.items() if lk.get(key) is not None]
    return "\n".join(out) + "\n"


def gpu_query_csv(data: dict[str, Any]) -> str:
    """`nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv`, the 8-digit domain as printed."""
    rows = ["index, name, uuid, pci.bus_id"]
    for g in _gpus(data):
        dom, _, rest = str(g.get("bus_id")).partition(":")
        rows.append(f"{g['index']}, {g.get('name')}, {g.get('uuid')}, {dom.zfill(8).upper()}:{rest.upper()}")
    return "\n".join(rows) + "\n"


_IBSTAT_STATE = {"ACTIVE": "Active", "DOWN": "Down", "INIT": "Initializing", "ARMED": "Armed"}


def _hexguid(colon: str) -> str:
    return "0x" + colon.replace(":", "")


def ibstat(devices: list[dict[str, Any]]) -> str:
    """`ibstat` of the nic probe's raw `infiniband` devices, laid out as rdma-core prints it."""
    out = []
    for d in devices:
        out += [f"CA '{d['name']}'", f"\tCA type: {d['hca_type']}", f"\tNumber of ports: {len(d['ports'])}",
                f"\tFirmware version: {d['fw_ver']}", "\tHardware version: 0",
                f"\tNode GUID: {_hexguid(d['node_guid'])}", f"\tSystem image GUID: {_hexguid(d['sys_image_guid'])}"]
        for p in d["ports"]:
            state = p["state"].split(": ")[1]
            out += [f"\tPort {p['port']}:", f"\t\tState: {_IBSTAT_STATE[state]}",
                    f"\t\tPhysical state: {p['phys_state'].split(': ')[1]}",
                    f"\t\tRate: {p['rate'].split()[0]}", "\t\tBase lid: 0", "\t\tLMC: 0", "\t\tSM lid: 0",
                    "\t\tCapability mask: 0xa651e848", f"\t\tPort GUID: {_hexguid(p['port_guid'])}",
                    f"\t\tLink layer: {p['link_layer']}"]
    return "\n".join(out) + "\n"


def ibstatus(devices: list[dict[str, Any]]) -> str:
    """`ibstatus`: the sysfs texts themselves, as in ibstatus_a100_9ports_gpud_01.txt."""
    out = []
    for d in devices:
        for p in d["ports"]:
            out += [f"Infiniband device '{d['name']}' port {p['port']} status:",
                    f"\tdefault gid:\t fe80:0000:0000:0000:{p['port_guid']}", "\tbase lid:\t 0x0",
                    "\tsm lid:\t\t 0x0", f"\tstate:\t\t {p['state']}", f"\tphys state:\t {p['phys_state']}",
                    f"\trate:\t\t {p['rate']}", f"\tlink_layer:\t {p['link_layer']}", ""]
    return "\n".join(out)


def dmesg(kmsg: dict[str, Any]) -> str:
    """`dmesg` of the kmsg probe's lines: seconds since boot in brackets, then the message."""
    return "".join(f"[{float(ln['t']):12.6f}] {ln['msg']}\n" for ln in kmsg.get("lines") or [])


# nvidia-smi's legend is the terminal view's without its own "?" (unknown) line
TOPO_LEGEND = "\n" + LEGEND.rsplit("\n", 1)[0] + "\n"


def _topo_cell(value: Any) -> str:
    return " X " if value == "X" else str(value) if value is not None else "N/A"


def topo_matrix(topology: dict[str, Any]) -> str:
    """`nvidia-smi topo -m` of a host's topology (NVML's matrix: the merged section a live run
    writes), tab-separated as nvidia-smi prints it, with its legend and NIC legend."""
    devices = topology["devices"]
    gpu = [d["kind"] == "gpu" for d in devices]
    rows = ["\t" + "\t".join(d["name"] for d in devices) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i, d in enumerate(devices):
        cells = [_topo_cell(v) for v in topology["matrix"][i]]
        if gpu[i]:
            numa = d.get("numa")
            cells += [d.get("cpu_affinity") or "N/A", "N/A" if numa is None else str(numa), "N/A"]
        rows.append(d["name"] + "\t" + "\t".join(cells))
    nics = [d for d in devices if d["kind"] == "nic"]
    legend = ["", "NIC Legend:", ""] + [f"  {d['name']}: {d.get('label')}" for d in nics] if nics else []
    return "\n".join(rows) + "\n" + TOPO_LEGEND + "\n".join(legend) + "\n"
