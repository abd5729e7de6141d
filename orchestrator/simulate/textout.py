"""The text a simulated machine's tools print: `nvidia-smi nvlink -s` / `-c`, `nvidia-smi -q`, `-q -x` and the
default screen, a `--query-gpu` CSV of the GPUs' bus ids, `ibstat`, `ibstatus` and `dmesg`, for the
import-vs-live tests.

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
from xml.sax.saxutils import escape as xml_escape

from orchestrator.facts.gpu_models import PCIE_GEN_GT_S
from orchestrator.facts.normalize.pcie import ACS_BITS
from orchestrator.facts.textparse.lspci import ACS_WORDS, CLASS_NAMES, PORT_NAMES
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


# ACS words with their bit values, in the order lspci prints them (SrcValid TransBlk ReqRedir ...)
_ACS_PRINTED = [(word, dict(ACS_BITS)[short]) for word, short in ACS_WORDS.items()]

# -- lspci: the pcie probe's sysfs records as lspci -tvnn and -vvvnn print them ----------------------
# (layout as lspci's ls-tree.c and the captures lspci_tvnn_*.txt / lspci_vvvnn_*.txt in tests/fixtures)


def _pci_devices(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(d["bdf"]): d for d in data.get("devices") or [] if isinstance(d, dict) and d.get("bdf")}


def _pci_parent(d: dict[str, Any]) -> str | None:
    path = [str(c) for c in d.get("path") or []]
    return path[-2] if len(path) >= 2 and not path[-2].startswith("pci") else None


def _pci_name(d: dict[str, Any]) -> str:
    """The name lspci -nn prints: the simulated machine has no pci.ids, so vendor and device ids."""
    vid, did = str(d.get("vendor") or "0x0000")[2:], str(d.get("device") or "0x0000")[2:]
    vendor = "NVIDIA Corporation" if vid == "10de" else f"Vendor {vid}"
    return f"{vendor} Device {did} [{vid}:{did}]"


def _bus(bdf: str) -> int:
    return int(bdf.split(":")[-2], 16)


class _TreeWriter:
    """lspci's tree drawing (ls-tree.c): one line buffer; a printed line leaves only its `|` and `+`
    columns standing (as `|`) for the lines below."""

    def __init__(self, devs: dict[str, dict[str, Any]]) -> None:
        self.devs, self.line = devs, ""
        self.out: list[str] = []
        self.children: dict[str, list[str]] = {}
        for b, d in sorted(devs.items()):
            self.children.setdefault(_pci_parent(d) or "", []).append(b)

    def emit(self, text: str) -> None:
        self.out.append(text)
        self.line = "".join("|" if c in "+|" else " " for c in text)

    def bus(self, members: list[str], prefix: str) -> None:
        if not members:
            self.emit(prefix)
        elif len(members) == 1:
            self.dev(members[0], prefix + "--")
        for i, b in enumerate(members if len(members) > 1 else []):
            lead = prefix if i == 0 else self.line[:len(prefix)]
            self.dev(b, lead + ("\\-" if i == len(members) - 1 else "+-"))

    def dev(self, b: str, prefix: str) -> None:
        text = prefix + b.split(":")[-1]
        kids = self.children.get(b, [])
        if kids:
            below = [_bus(x) for x in self.devs if x != b and b in (self.devs[x].get("path") or [])]
            lo, hi = min(below), max(below)
            self.bus(kids, text + (f"-[{lo:02x}]--" if lo == hi else f"-[{lo:02x}-{hi:02x}]--"))
            return
        self.emit(f"{text}  {_pci_name(self.devs[b])}")


def lspci_tree(data: dict[str, Any]) -> str:
    """`lspci -tvnn`: one root per host bridge the sysfs paths name, bridges with their bus range."""
    devs = _pci_devices(data)
    w = _TreeWriter(devs)
    roots: dict[str, list[str]] = {}
    for b in w.children.get("", []):
        path = [str(c) for c in devs[b].get("path") or []]
        host = path[0][3:] if path and path[0].startswith("pci") else b.rsplit(":", 1)[0]
        roots.setdefault(host, []).append(b)
    for i, (root, members) in enumerate(sorted(roots.items())):
        lead = "-" if len(roots) == 1 else "-+-" if i == 0 else " \\-" if i == len(roots) - 1 else " +-"
        w.bus(members, f"{lead}[{root}]-")
    return "\n".join(w.out) + "\n"


def _lspci_link(key: str, gen: Any, width: Any) -> str | None:
    if not isinstance(gen, int) or gen not in PCIE_GEN_GT_S or not isinstance(width, int):
        return None
    return f"\t\t{key}:\t" + ("Port #0, " if key == "LnkCap" else "") + f"Speed {PCIE_GEN_GT_S[gen]:g}GT/s, Width x{width}"


def _lspci_acs(acs: Any) -> list[str]:
    if not (isinstance(acs, dict) and isinstance(acs.get("cap"), int)):
        return []  # no ACS capability, or not read: lspci prints no ACS lines either

    def flags(value: int) -> str:
        return " ".join(f"{word}{'+' if value & bit else '-'}" for word, bit in _ACS_PRINTED)
    return ["\tCapabilities: [220 v1] Access Control Services",
            f"\t\tACSCap:\t{flags(acs['cap'])}", f"\t\tACSCtl:\t{flags(int(acs.get('ctl') or 0))}"]


def _lspci_block(d: dict[str, Any]) -> list[str]:
    """One device's `lspci -vvvnn` block: header, bus range, NUMA node, IOMMU group, the PCI Express
    capability's port type and link, ACS, the bound driver (what lspci -vvv prints as root)."""
    code = str(d.get("class") or "0x000000")[2:6]
    out = [f"{d['bdf']} {CLASS_NAMES.get(code, 'Class ' + code)} [{code}]: {_pci_name(d)}"]
    cfg: dict[str, Any] = d["config"] if isinstance(d.get("config"), dict) else {}
    if isinstance(cfg.get("secondary_bus"), int):
        out.append(f"\tBus: primary=00, secondary={cfg['secondary_bus']:02x}, subordinate={cfg.get('subordinate_bus') or 0:02x}")
    if d.get("numa_node") not in (None, "-1"):
        out.append(f"\tNUMA node: {d['numa_node']}")
    if d.get("iommu_group") is not None:
        out.append(f"\tIOMMU group: {d['iommu_group']}")
    pcie = cfg.get("pcie")
    if isinstance(pcie, dict) and isinstance(pcie.get("port_type"), int):
        out.append(f"\tCapabilities: [68] Express (v2) {PORT_NAMES.get(pcie['port_type'], 'Endpoint')}, MSI 00")
        out += [x for x in (_lspci_link("LnkCap", pcie.get("lnkcap_speed"), pcie.get("lnkcap_width")),
                            _lspci_link("LnkSta", pcie.get("lnksta_speed"), pcie.get("lnksta_width"))) if x]
    out += _lspci_acs(cfg.get("acs"))
    if d.get("driver"):
        out.append(f"\tKernel driver in use: {d['driver']}")
    return out


def lspci_verbose(data: dict[str, Any]) -> str:
    """`lspci -vvvnn` of every function, in bus order, a blank line after each block."""
    return "".join("\n".join(_lspci_block(d)) + "\n\n" for _, d in sorted(_pci_devices(data).items()))


# -- benchmarks: p2pBandwidthLatencyTest and nccl-tests ---------------------------------------------

def _cells(row: list[Any], fmt: str) -> str:
    """One matrix row as the CUDA sample prints it; a cell the probe did not measure (the GPU-local
    latency and bidirectional copy it does not time) as `N/A`."""
    return "".join(f" {fmt % v:>6}" if v is not None else "    N/A" for v in row)


def _p2p_matrix(title: str, corner: str, mat: list[list[Any]], fmt: str) -> list[str]:
    n = len(mat)
    out = [title, f"   {corner:>3}" + "".join(f" {i:>6}" for i in range(n))]
    out += [f" {a:>5}" + _cells(row, fmt) for a, row in enumerate(mat)]
    return out


def p2p_bandwidth_latency(p2p: dict[str, Any]) -> str:
    """`p2pBandwidthLatencyTest` (CUDA samples) from a machine's live p2p facts: the same CUDA
    answers the probe read (devices, cuDeviceCanAccessPeer, the copies it timed), laid out as
    tests/fixtures/evidence/p2p_8x_h100_sxm_hgx_01.txt prints them.  The P2P=Disabled and CPU
    latency blocks, which the probe does not measure, are left out."""
    mats = p2p["matrices"]
    out = ["[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"]
    for g in p2p["gpus"]:
        dom, bus, _ = str(g["bus_id"]).split(":")
        out.append(f"Device: {g['index']}, {g['name']}, pciBusID: {int(bus, 16):x}, pciDeviceID: 0, "
                   f"pciDomainID:{int(dom, 16):x}")
    for a, row in enumerate(mats["can_access_peer"]):
        out += [f"Device={a} {'CAN' if ok else 'CANNOT'} Access Peer Device={b}"
                for b, ok in enumerate(row) if a != b and ok is not None]
    out += _p2p_matrix("Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)", "D\\D",
                       mats["ce_gbps"], "%.2f")
    out += _p2p_matrix("Bidirectional P2P=Enabled Bandwidth Matrix (GB/s)", "D\\D", mats["bidir_gbps"], "%.2f")
    out += _p2p_matrix("P2P=Enabled Latency (P2P Writes) Matrix (us)", "GPU", mats["latency_us"], "%.2f")
    return "\n".join(out) + "\n"


def _nccl_row(r: dict[str, Any]) -> str:
    """A result row: the out-of-place figures as nccl-tests prints them; the in-place columns N/A
    (the probe times out-of-place only, as nccl-tests prints an op without an in-place form)."""
    time = f"{r['time_us']:.0f}" if r["time_us"] >= 10000 else f"{r['time_us']:.1f}"
    return (f"{r['size_bytes']:>12} {r['count']:>13} {r['dtype']:>9} {r['redop']:>7} {-1:>7} {time:>8} "
            f"{r['algbw_gbps']:>7.2f} {r['busbw_gbps']:>7.2f} {r['wrong']:>6}      N/A     N/A     N/A    N/A")


def nccl_tests(nccl: dict[str, Any], host: str) -> str:
    """`all_reduce_perf -g N` with NCCL_DEBUG=INFO, from the nccl probe's data of a machine: the
    GPUs it selected as ranks, NCCL's own INFO lines, its results and their average, laid out as
    tests/fixtures/evidence/nccl_all_reduce_2x8_h100_a3mega_01.txt prints them."""
    gpus, sel = nccl["gpus"], nccl["selected"]
    out = ["# Collective test starting: all_reduce_perf", f"# nThread 1 nGpus {len(sel)} minBytes {nccl['params']['min_bytes']} maxBytes "
           f"{nccl['params']['max_bytes']} step: {nccl['params']['step_factor']}(factor) warmup iters: 1 iters: 2 "
           "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    for rank, i in enumerate(sel):
        dom, bus, dev = str(gpus[i]["bus_id"]).split(".")[0].split(":")
        out.append(f"#  Rank {rank:>2} Group  0 Pid   4242 on {host} device {rank:>2} [{dom}:{bus}:{dev}] "
                   f"{gpus[i]['name']}")
    out += list(nccl["debug_lines"])
    out += ["#", "#                                                              out-of-place                       "
            "in-place", "#       size         count      type   redop    root     time   algbw   busbw #wrong     time "
            "  algbw   busbw #wrong", "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
            "            (us)  (GB/s)  (GB/s)"]
    out += [_nccl_row(r) for r in nccl["results"]]
    busbw = [r["busbw_gbps"] for r in nccl["results"]]
    wrong = sum(r["wrong"] for r in nccl["results"])
    out += [f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}",
            f"# Avg bus bandwidth    : {sum(busbw) / len(busbw):g} ", "#"]
    return "\n".join(out) + "\n"


# -- nvidia-smi -q: the nvml probe's data as nvidia-smi prints the same NVML answers -----------------

_VIRT_WORDS = {"none": "None", "passthrough": "Pass-Through", "vgpu": "VGPU", "host_vgpu": "Host VGPU",
               "host_vsga": "Host VSGA"}


def _na(value: Any, fmt: str = "{}") -> str:
    """A value as nvidia-smi prints it; what NVML did not answer is `N/A`, as there."""
    return "N/A" if value is None else fmt.format(value)


def _enabled(value: Any) -> str:
    return "N/A" if value is None else ("Enabled" if value else "Disabled")


def _yes_no(value: Any) -> str:
    return "N/A" if value is None else ("Yes" if value else "No")


def _row(depth: int, key: str, value: str | None = None) -> str:
    """One -q line: four spaces a level, the key padded to nvidia-smi's column (55) before ` : `."""
    left = "    " * depth + key
    return left if value is None else f"{left.ljust(55)}: {value}"


def _smi_bus(bus: Any) -> str:
    dom, _, rest = str(bus).partition(":")
    return f"{dom.zfill(8).upper()}:{rest.upper()}"


def _q_pcie(g: dict[str, Any]) -> list[str]:
    p = g.get("pcie") or {}
    dev = g.get("pci_device_id")
    return [_row(1, "PCI"), _row(2, "Bus Id", _smi_bus(g.get("bus_id"))),
            _row(2, "Device Id", _na(dev and f"{dev[2:].upper()}10DE", "0x{}")),
            _row(2, "GPU Link Info"), _row(3, "PCIe Generation"), _row(4, "Max", _na(p.get("gen_max"))),
            _row(4, "Current", _na(p.get("gen_current"))), _row(4, "Device Max", _na(p.get("gen_gpu_max"))),
            _row(3, "Link Width"), _row(4, "Max", _na(p.get("width_max"), "{}x")),
            _row(4, "Current", _na(p.get("width_current"), "{}x")),
            _row(2, "Replays Since Reset", _na(g.get("pcie_replays")))]


def _q_health(g: dict[str, Any]) -> list[str]:
    """ECC, remapped rows, temperature, power and fabric, as -q groups them."""
    ecc, rr, fab = g.get("ecc") or {}, g.get("remapped_rows") or {}, g.get("fabric") or {}
    status = fab.get("status")
    return [_row(1, "ECC Mode"), _row(2, "Current", _enabled(ecc.get("mode_current"))),
            _row(2, "Pending", _enabled(ecc.get("mode_pending"))), _row(1, "ECC Errors"), _row(2, "Volatile"),
            _row(3, "DRAM Uncorrectable", _na(ecc.get("volatile_uncorrected"))), _row(2, "Aggregate"),
            _row(3, "DRAM Correctable", _na(ecc.get("aggregate_corrected"))),
            _row(3, "DRAM Uncorrectable", _na(ecc.get("aggregate_uncorrected"))),
            _row(1, "Remapped Rows"), _row(2, "Correctable Error", _na(rr.get("correctable"))),
            _row(2, "Uncorrectable Error", _na(rr.get("uncorrectable"))), _row(2, "Pending", _yes_no(rr.get("pending"))),
            _row(2, "Remapping Failure Occurred", _yes_no(rr.get("failure"))),
            _row(1, "Temperature"), _row(2, "GPU Current Temp", _na(g.get("temperature_c"), "{} C")),
            _row(1, "GPU Power Readings"), _row(2, "Power Draw", _na(g.get("power_w"), "{:.2f} W")),
            _row(1, "Fabric"), _row(2, "State", _na(fab.get("state"), "{}").replace("_", " ").title()),
            _row(2, "Status", _na(status and status.title())), _row(2, "CliqueId", _na(fab.get("clique_id"))),
            _row(2, "ClusterUUID", _na(fab.get("cluster_uuid")))]


def _q_mig(g: dict[str, Any]) -> list[str]:
    mig = g.get("mig") or {}
    out = [_row(1, "MIG Mode"), _row(2, "Current", _enabled(mig.get("current"))),
           _row(2, "Pending", _enabled(mig.get("pending")))]
    if mig.get("instances"):
        out.append(_row(1, "MIG Devices"))
        for m in mig["instances"]:
            out += [_row(2, "MIG Device"), _row(3, "Index", _na(m.get("index"))), _row(3, "FB Memory Usage"),
                    _row(4, "Total", _na(m.get("memory_total_bytes") and m["memory_total_bytes"] // 2**20, "{} MiB"))]
    return out


def _q_gpu(g: dict[str, Any]) -> list[str]:
    fans = g.get("fans")
    mem = {k: g.get(k) and g[k] // 2**20 for k in ("memory_total_bytes", "memory_used_bytes")}
    compute = g.get("compute_mode")
    return [f"GPU {_smi_bus(g.get('bus_id'))}", _row(1, "Product Name", _na(g.get("name"))),
            _row(1, "Product Architecture", _na(g.get("architecture"))),
            _row(1, "Persistence Mode", _enabled(g.get("persistence_mode"))), *_q_mig(g),
            _row(1, "Serial Number", _na(g.get("serial"))), _row(1, "GPU UUID", _na(g.get("uuid"))),
            _row(1, "Minor Number", _na(g.get("minor_number"))), _row(1, "VBIOS Version", _na(g.get("vbios"))),
            _row(1, "Board Part Number", _na(g.get("board_part_number"))), _row(1, "Inforom Version"),
            _row(2, "Image Version", _na(g.get("inforom_image"))), _row(1, "GPU Virtualization Mode"),
            _row(2, "Virtualization Mode", _na(_VIRT_WORDS.get(g.get("virtualization_mode") or ""))),
            *_q_pcie(g), _row(1, "Fan Speed", _na(fans[0]["speed_pct"] if fans else None, "{} %")),
            _row(1, "FB Memory Usage"), _row(2, "Total", _na(mem["memory_total_bytes"], "{} MiB")),
            _row(2, "Used", _na(mem["memory_used_bytes"], "{} MiB")),
            _row(1, "Compute Mode", _na(compute and compute.replace("_", " ").title())), *_q_health(g), ""]


def smi_query(data: dict[str, Any]) -> str:
    """`nvidia-smi -q` of the nvml probe's data (the fields nvidia-smi prints from the NVML calls the
    probe makes), laid out as the real capture tests/fixtures/text/h200_real_q.txt prints them.
    A lost GPU is left out: nvidia-smi cannot print a block for a GPU it cannot open."""
    gpus = [g for g in _gpus(data) if not g.get("lost")]
    out = ["", "==============NVSMI LOG==============", "", _row(0, "Driver Version", _na(data.get("driver_version"))),
           _row(0, "CUDA Version", _na(data.get("cuda_driver_version"))), "",
           _row(0, "Attached GPUs", str(data.get("count", len(gpus))))]
    for g in gpus:
        out += _q_gpu(g)
    return "\n".join(out) + "\n"



# -- nvidia-smi -q -x (580 layout) ---------------------------------------------------------------------

# An element: (tag, text) or (tag, [children]); built from the same values -q prints, laid out as the
# real capture tests/fixtures/text/h200_real_q_x.xml (580.159.04) and the MIG one beside it.
_Xml = tuple  # (str, str | list[_Xml])


def _x_pci(g: dict[str, Any]) -> _Xml:
    p = g.get("pcie") or {}
    dev = g.get("pci_device_id")
    gen = [("max_link_gen", _na(p.get("gen_max"))), ("current_link_gen", _na(p.get("gen_current"))),
           ("max_device_link_gen", _na(p.get("gen_gpu_max"))), ("max_host_link_gen", "N/A")]
    widths = [("max_link_width", _na(p.get("width_max"), "{}x")),
              ("current_link_width", _na(p.get("width_current"), "{}x"))]
    return ("pci", [("pci_device_id", _na(dev and f"{dev[2:].upper()}10DE")), ("pci_bus_id", _smi_bus(g.get("bus_id"))),
                    ("pci_gpu_link_info", [("pcie_gen", gen), ("link_widths", widths)]),
                    ("replay_counter", _na(g.get("pcie_replays")))])


def _x_health(g: dict[str, Any]) -> list[_Xml]:
    ecc, rr, fab = g.get("ecc") or {}, g.get("remapped_rows") or {}, g.get("fabric") or {}
    status = fab.get("status")
    return [("ecc_mode", [("current_ecc", _enabled(ecc.get("mode_current"))),
                          ("pending_ecc", _enabled(ecc.get("mode_pending")))]),
            ("ecc_errors", [("volatile", [("dram_uncorrectable", _na(ecc.get("volatile_uncorrected")))]),
                            ("aggregate", [("dram_correctable", _na(ecc.get("aggregate_corrected"))),
                                           ("dram_uncorrectable", _na(ecc.get("aggregate_uncorrected")))])]),
            ("remapped_rows", [("remapped_row_corr", _na(rr.get("correctable"))),
                               ("remapped_row_unc", _na(rr.get("uncorrectable"))),
                               ("remapped_row_pending", _yes_no(rr.get("pending"))),
                               ("remapped_row_failure", _yes_no(rr.get("failure")))]),
            ("temperature", [("gpu_temp", _na(g.get("temperature_c"), "{} C"))]),
            ("gpu_power_readings", [("instant_power_draw", _na(g.get("power_w"), "{:.2f} W"))]),
            ("fabric", [("state", _na(fab.get("state"), "{}").replace("_", " ").title()),
                        ("status", _na(status and status.title())), ("cliqueId", _na(fab.get("clique_id"))),
                        ("clusterUuid", _na(fab.get("cluster_uuid")))])]


def _x_mig(g: dict[str, Any]) -> list[_Xml]:
    mig = g.get("mig") or {}
    devices = [("mig_device", [("index", _na(m.get("index"))), ("fb_memory_usage", [(
        "total", _na(m.get("memory_total_bytes") and m["memory_total_bytes"] // 2**20, "{} MiB"))])])
        for m in mig.get("instances") or []]
    return [("mig_mode", [("current_mig", _enabled(mig.get("current"))), ("pending_mig", _enabled(mig.get("pending")))]),
            ("mig_devices", devices or "None")]


def _x_gpu(g: dict[str, Any]) -> _Xml:
    fans = g.get("fans")
    mem = {k: g.get(k) and g[k] // 2**20 for k in ("memory_total_bytes", "memory_used_bytes")}
    compute = g.get("compute_mode")
    return ("gpu", [
        ("product_name", _na(g.get("name"))), ("product_architecture", _na(g.get("architecture"))),
        ("persistence_mode", _enabled(g.get("persistence_mode"))), *_x_mig(g), ("serial", _na(g.get("serial"))),
        ("uuid", _na(g.get("uuid"))), ("minor_number", _na(g.get("minor_number"))),
        ("vbios_version", _na(g.get("vbios"))), ("board_part_number", _na(g.get("board_part_number"))),
        ("inforom_version", [("img_version", _na(g.get("inforom_image")))]),
        ("gpu_virtualization_mode", [("virtualization_mode",
                                      _na(_VIRT_WORDS.get(g.get("virtualization_mode") or "")))]),
        _x_pci(g), ("fan_speed", _na(fans[0]["speed_pct"] if fans else None, "{} %")),
        ("fb_memory_usage", [("total", _na(mem["memory_total_bytes"], "{} MiB")),
                             ("used", _na(mem["memory_used_bytes"], "{} MiB"))]),
        ("compute_mode", _na(compute and compute.replace("_", " ").title())), *_x_health(g)])


def _x_lines(el: _Xml, depth: int, attrs: str = "") -> list[str]:
    tag, body = el
    pad = "\t" * depth
    if isinstance(body, str):
        return [f"{pad}<{tag}{attrs}>{xml_escape(body)}</{tag}>"]
    return [f"{pad}<{tag}{attrs}>", *(ln for c in body for ln in _x_lines(c, depth + 1)), f"{pad}</{tag}>"]


def smi_query_xml(data: dict[str, Any]) -> str:
    """`nvidia-smi -q -x` of the nvml probe's data: the values `smi_query` prints, as the 580 driver's
    XML names them (a lost GPU is left out, as there)."""
    gpus = [g for g in _gpus(data) if not g.get("lost")]
    out = ['<?xml version="1.0" ?>', '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">', "<nvidia_smi_log>"]
    out += _x_lines(("driver_version", _na(data.get("driver_version"))), 1)
    out += _x_lines(("cuda_version", _na(data.get("cuda_driver_version"))), 1)
    out += _x_lines(("attached_gpus", str(data.get("count", len(gpus)))), 1)
    for g in gpus:
        out += _x_lines(_x_gpu(g), 1, f' id="{xml_escape(_smi_bus(g.get("bus_id")))}"')
    return "\n".join([*out, "</nvidia_smi_log>"]) + "\n"

# -- the default nvidia-smi screen (535-575 layout) ----------------------------------------------------

_SCREEN_RULE = "+-----------------------------------------+----------------------+----------------------+"


def _screen_ecc(g: dict[str, Any]) -> str:
    """Volatile Uncorr. ECC: the count with ECC on, `On` while MIG is on (no count), `Off`, `N/A`."""
    ecc, mig = g.get("ecc") or {}, g.get("mig") or {}
    if ecc.get("mode_current") is None:
        return "N/A"
    if not ecc["mode_current"]:
        return "Off"
    return "On" if mig.get("current") else _na(ecc.get("volatile_uncorrected"))


def _screen_gpu(g: dict[str, Any]) -> list[str]:
    fans, mig = g.get("fans"), g.get("mig")
    name = str(g.get("name"))
    name = name if len(name) <= 28 else name[:25] + "..."  # nvidia-smi cuts a name to its column
    mib = {k: _na(g.get(k) and g[k] // 2**20, "{}MiB") for k in ("memory_used_bytes", "memory_total_bytes")}
    limit = (g.get("power_limits") or {}).get("limit_w")
    power = f"{_na(g.get('power_w') and round(g['power_w']), '{}W')} / {_na(limit and round(limit), '{}W')}"
    compute = (g.get("compute_mode") or "").replace("exclusive_", "E. ").title() or "N/A"
    fan = _na(fans[0]["speed_pct"] if fans else None, "{}%")
    # the simulated NVML has no performance state (the probe does not read it): the screen shows P0
    row2 = f" {fan:<4} {_na(g.get('temperature_c'), '{}C'):>5}    P0 {power:>22} "
    return [f"| {g.get('index'):>3}  {name:<28}{_enabled(g.get('persistence_mode')).replace('Enabled', 'On').replace('Disabled', 'Off'):>5}  "
            f"| {_smi_bus(g.get('bus_id'))} Off | {_screen_ecc(g):>20} |",
            f"|{row2}| {mib['memory_used_bytes']:>8} / {mib['memory_total_bytes']:>9} | {'N/A':>8} {compute:>11} |",
            f"|{'':41}|{'':22}| {_enabled(mig.get('current') if mig else None):>20} |", _SCREEN_RULE]


def smi_screen(data: dict[str, Any]) -> str:
    """The default `nvidia-smi` screen of the nvml probe's data, laid out as the 535-575 drivers print
    it (tests/fixtures/evidence/smi_screen_535_a100_pcie_mig_2_devices_01.txt): banner, header and three
    rows per GPU; no MIG devices or processes boxes (the probe reads neither)."""
    out = ["+---------------------------------------------------------------------------------------+",
           f"| NVIDIA-SMI {_na(data.get('driver_version')):<22} Driver Version: {_na(data.get('driver_version')):<14}"
           f" CUDA Version: {_na(data.get('cuda_driver_version')):<9}|",
           "|-----------------------------------------+----------------------+----------------------+",
           "| GPU  Name                 Persistence-M | Bus-Id        Disp.A | Volatile Uncorr. ECC |",
           "| Fan  Temp   Perf          Pwr:Usage/Cap |         Memory-Usage | GPU-Util  Compute M. |",
           "|                                         |                      |               MIG M. |",
           "|=========================================+======================+======================|"]
    for g in _gpus(data):
        out += _screen_gpu(g)
    return "\n".join(out) + "\n"
