"""One writer per facts section (issue 48 item 5): the text a simulated machine's tools print,
imported, gives the same facts as that machine's live probes, for every field both can see.

The live side is the probes' data of demo machines (orchestrator/demo/recordings: the real probes
run on the simulated NVML, sysfs and /dev/kmsg) through the normalizers; the text side is what
the tools print from the same sources (orchestrator/simulate/textout.py: `nvidia-smi nvlink -s`
and `-c` with a CSV query for the bus ids, `nvidia-smi -q` and `-q -x`, `nvidia-smi topo -m`, `ibstat`, `dmesg`,
lspci), read by `probe import`'s parser, which hands the nvlink, gpus, pcie, nic and kmsg
normalizers the probe's shape.
Every field of either section is listed below as seen by both, or by one side only, so a field
that appears on one side unlisted fails.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from orchestrator.facts.normalize import fabric as fabric_normalize
from orchestrator.facts.normalize import normalize_host
from orchestrator.facts.textparse import import_texts
from orchestrator.simulate import textout
from tests.support.collected import RECORDINGS

# NVSwitch with two links down, direct hybrid cube mesh, workstation bridges, PCI domains (GB200), 7 GPUs
MACHINES = ["dgx-h100-04", "dgx1-v100-01", "ws-a6000-01", "gb200-01", "b300-01"]

SECTION_BOTH = {"supported", "order", "gpus", "links_total", "links_up_total"}
# NVML's remote ends (pairs, switches and the NV# they make) and the driver are not in nvlink -s/-c
SECTION_LIVE_ONLY = {"pairs", "nvswitches", "nv", "driver_version"}
SECTION_TEXT_ONLY = {"origin", "source", "source_files", "confidence", "low_confidence_fields",
                     "pairs_unknown", "nvswitches_unknown"}
GPU_BOTH = {"index", "bus_id", "uuid", "name", "links_total", "links_up", "inactive", "lost", "links"}
GPU_ONE_SIDE = {"version", "unknown"}  # the NVLink version is NVML's; text names why it is missing
LINK_BOTH = {"link", "state", "p2p_supported", "sysmem_access", "p2p_atomics"}
LINK_LIVE_ONLY = {"version", "remote_bus_id", "remote_type", "errors"}
# speed as nvlink -s prints it; nvlink -c capabilities NVML's probe does not read
LINK_TEXT_ONLY = {"speed_gbps", "sysmem_atomics", "sli_supported", "link_supported"}



def _pairs(live: list, text: list) -> list:
    """The two sides' items side by side, none left over (zip's strict= is Python 3.10+)."""
    assert len(live) == len(text), (len(live), len(text))
    return list(zip(live, text))

def _recorded(machine: str, probe: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RECORDINGS / machine / f"{probe}.json").read_text())["data"]
    return data


def _live_and_text(machine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = _recorded(machine, "nvlink")
    live = normalize_host({"nvlink": raw})[0]["nvlink"]
    texts = [("nvlink-s.txt", textout.nvlink_status(raw)), ("nvlink-c.txt", textout.nvlink_caps(raw)),
             ("query.csv", textout.gpu_query_csv(raw))]
    host = import_texts(texts)
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    return live, host.facts["nvlink"]


def _pick(d: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: d.get(k) for k in sorted(keys)}


@pytest.mark.parametrize("machine", MACHINES)
def test_imported_nvlink_text_equals_the_live_nvlink_facts(machine: str) -> None:
    live, text = _live_and_text(machine)
    assert set(live) == SECTION_BOTH | SECTION_LIVE_ONLY
    # text keeps pairs, switches, NV# null (NV# is topo -m's where imported); nvlink -s names no driver
    assert set(text) == SECTION_BOTH | SECTION_TEXT_ONLY | SECTION_LIVE_ONLY - {"driver_version"}
    assert text["pairs"] is None and text["nvswitches"] is None and text["nv"] is None
    assert _pick(text, SECTION_BOTH - {"gpus"}) == _pick(live, SECTION_BOTH - {"gpus"})
    assert len(text["gpus"]) == len(live["gpus"]) > 0
    for lg, tg in _pairs(live["gpus"], text["gpus"]):
        assert set(lg) == set(tg) == GPU_BOTH | GPU_ONE_SIDE
        assert _pick(tg, GPU_BOTH - {"links"}) == _pick(lg, GPU_BOTH - {"links"}), lg["index"]
        assert len(tg["links"]) == len(lg["links"]) > 0
        for ll, tl in _pairs(lg["links"], tg["links"]):
            assert set(ll) == LINK_BOTH | LINK_LIVE_ONLY | {"unknown"}
            assert set(tl) == LINK_BOTH | LINK_LIVE_ONLY | LINK_TEXT_ONLY | {"unknown"}
            assert _pick(tl, LINK_BOTH) == _pick(ll, LINK_BOTH), (lg["index"], ll["link"])
            # what text cannot see is null there and named as unknown, never a guess
            assert all(tl[k] is None for k in LINK_LIVE_ONLY) and set(tl["unknown"]) >= LINK_LIVE_ONLY
            assert tl["speed_gbps"] if tl["state"] == "up" else tl["speed_gbps"] is None


def test_the_machines_cover_links_down_direct_links_and_switches() -> None:
    """The set above is not all alike: a down link, direct GPU pairs and NVSwitch fabrics."""
    lives = {m: _live_and_text(m)[0] for m in MACHINES}
    assert any(g["inactive"] for live in lives.values() for g in live["gpus"])
    assert any(live["pairs"] for live in lives.values()) and any(live["nvswitches"] for live in lives.values())
    assert any(b and not b.startswith("0000:") for live in lives.values() for b in live["order"])


# -- nic and kmsg: ibstat and dmesg of the same machines ---------------------------------------------

# dgx-h100-16/17 log an Xid; ws-a6000-01 has no HCA (no nic section either way)
HEALTH_MACHINES = [*MACHINES, "dgx-h100-16", "dgx-h100-17"]
NIC_BOTH = {"devices", "infiniband_present"}
# the peer-memory module and the net interfaces are not in ibstat: text names them unknown
NIC_LIVE_ONLY = {"gdr", "netdevs"}
NIC_TEXT_ONLY = {"origin", "source", "source_files", "confidence", "low_confidence_fields", "unknown"}
HCA_BOTH = {"name", "hca_type", "model", "fw_ver", "node_guid", "sys_image_guid", "ports"}
HCA_LIVE_ONLY = {"bus_id", "board_id", "driver"}  # sysfs's; ibstat prints none of them
PORT_BOTH = {"port", "state", "phys_state", "rate_gbps", "link_layer", "port_guid"}
# sysfs's rate reads "400 Gb/sec (4X NDR)", ibstat's "400": both give rate_gbps; counters and the
# port's net interface are sysfs's (null in text)
PORT_ONE_SIDE = {"rate", "counters", "hw_counters", "netdev"}
KMSG_BOTH = {"readable", "unreadable_reason", "attempts", "events", "truncated"}
# which boot, when it began and who read it are /dev/kmsg's; dmesg prints the lines only.  The
# recording keeps the lines the probe kept, not every line it scanned: lines_scanned is the live one's
KMSG_LIVE_ONLY = {"boot_id", "boot_time", "uid", "lines_scanned", "source"}
KMSG_TEXT_ONLY = {"origin", "source_files", "confidence", "low_confidence_fields"}


def _health(machine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    nic, kmsg = _recorded(machine, "nic"), _recorded(machine, "kmsg")
    live = normalize_host({"nic": nic, "kmsg": kmsg})[0]
    texts = [("dmesg.txt", textout.dmesg(kmsg))]
    if nic["infiniband"]:
        texts.append(("ibstat.txt", textout.ibstat(nic["infiniband"])))
    host = import_texts(texts)
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    return live, host.facts


@pytest.mark.parametrize("machine", HEALTH_MACHINES)
def test_imported_ibstat_equals_the_live_nic_facts(machine: str) -> None:
    live, text = _health(machine)
    if not live["nic"]["devices"]:
        assert "nic" not in text  # an empty ibstat is not a host without HCAs: nothing imported
        return
    nic = text["nic"]
    assert set(live["nic"]) == NIC_BOTH | NIC_LIVE_ONLY and set(nic) == NIC_BOTH | NIC_LIVE_ONLY | NIC_TEXT_ONLY
    assert nic["gdr"] is None and "netdevs" in nic["unknown"]
    assert len(nic["devices"]) == len(live["nic"]["devices"])
    for ld, td in _pairs(live["nic"]["devices"], nic["devices"]):
        assert set(ld) == set(td) == HCA_BOTH | HCA_LIVE_ONLY
        assert _pick(td, HCA_BOTH - {"ports"}) == _pick(ld, HCA_BOTH - {"ports"})
        assert all(td[k] is None for k in HCA_LIVE_ONLY)
        for lp, tp in _pairs(ld["ports"], td["ports"]):
            assert set(lp) == set(tp) == PORT_BOTH | PORT_ONE_SIDE
            assert _pick(tp, PORT_BOTH) == _pick(lp, PORT_BOTH)
            assert tp["netdev"] is None


@pytest.mark.parametrize("machine", HEALTH_MACHINES)
def test_imported_dmesg_equals_the_live_kmsg_facts(machine: str) -> None:
    live, text = _health(machine)
    kmsg = text["kmsg"]
    assert set(live["kmsg"]) == KMSG_BOTH | KMSG_LIVE_ONLY
    assert set(kmsg) == KMSG_BOTH | KMSG_LIVE_ONLY | KMSG_TEXT_ONLY
    assert _pick(kmsg, KMSG_BOTH) == _pick(live["kmsg"], KMSG_BOTH)
    assert kmsg["boot_id"] is None and kmsg["uid"] is None and kmsg["source"] == "text"


def test_the_health_machines_hold_events_and_hcas() -> None:
    lives = [_health(m)[0] for m in HEALTH_MACHINES]
    assert any(live["kmsg"]["events"] for live in lives)
    assert sum(1 for live in lives if live["nic"]["devices"]) >= 3


# -- topology: nvidia-smi topo -m of the same machines ---------------------------------------------

TOPO_BOTH = {"devices", "matrix"}
# live: which probe gave each cell (nvlink, nvml, pcie); text: every cell "text"
TOPO_ONE_SIDE = {"source"}
TOPO_TEXT_ONLY = {"origin", "source_files", "confidence", "low_confidence_fields", "legend_style",
                  "nearest_gpus_by_cpu", "notes"}
GPU_DEVICE_BOTH = {"name", "kind", "bus_id", "cpu_affinity", "numa"}  # bus ids from the CSV query
NIC_DEVICE_BOTH = {"name", "kind", "label"}
NIC_DEVICE_LIVE_ONLY = {"bus_id"}  # topo -m names a NIC by its label only: null in text
DEVICE_TEXT_ONLY = {"gpu_numa_id", "unknown"}  # topo -m's own column; text's reasons


@pytest.mark.parametrize("machine", [*MACHINES, "dgx-h100-16"])
def test_imported_topo_m_equals_the_live_topology(machine: str) -> None:
    env = {p: _recorded(machine, p) for p in ("nvml", "nvlink", "pcie")}
    live = normalize_host(env)[0]["topology"]
    texts = [("topo.txt", textout.topo_matrix(live)), ("query.csv", textout.gpu_query_csv(env["nvlink"]))]
    host = import_texts(texts)
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    text = host.facts["topology"]
    assert set(live) == TOPO_BOTH | TOPO_ONE_SIDE and set(text) == TOPO_BOTH | TOPO_ONE_SIDE | TOPO_TEXT_ONLY
    assert text["matrix"] == live["matrix"]
    assert {c for row in text["source"] for c in row} == {"self", "text"}
    assert len(text["devices"]) == len(live["devices"]) > 0
    for ld, td in _pairs(live["devices"], text["devices"]):
        both, live_only = (GPU_DEVICE_BOTH, set()) if ld["kind"] == "gpu" else (NIC_DEVICE_BOTH, NIC_DEVICE_LIVE_ONLY)
        assert set(ld) == both | live_only and set(td) - DEVICE_TEXT_ONLY == both | live_only
        assert _pick(td, both) == _pick(ld, both)
        assert all(td[k] is None and k in td["unknown"] for k in live_only)


# -- pcie: lspci -tvnn and -vvvnn of the same machines ------------------------------------------------

# NVSwitch trays, a DGX-1's PLX switches, workstation root ports with an NVMe switch, two PCI domains
# (B300), a 4090 box with down links, a GPU link trained below its width (dgx-h100-06), ACS redirect
# above the GPUs (dgx-a100-03).  gb200-01's recording puts a NIC on bus 09 straight below a
# root port whose bus is 01, which no lspci tree can draw (it names a device by dev.fn below its
# bridge's secondary bus), so that machine is not in this set.
PCIE_MACHINES = ["dgx-h100-04", "dgx1-v100-01", "ws-a6000-01", "b300-01", "rtx4090-01", "dgx-h100-06",
                 "dgx-a100-03"]
PCIE_BOTH = {"devices", "gpus", "nics", "nvswitches", "nvme", "switches", "acs", "tree", "downgraded"}
# /proc/driver/nvidia, /dev, the iommu, AER counters and sysfs names are not in lspci; text keeps
# the judgements built on them (uplinks, virtual platform, config access) null and says why
PCIE_LIVE_ONLY = {"iommu", "aer_links", "nvswitch_nodes"}
PCIE_ONE_SIDE = {"levels", "gpu_counts", "uplinks", "virtual_platform", "config_access", "needs_root"}
PCIE_TEXT_ONLY = {"origin", "source", "source_files", "confidence", "low_confidence_fields",
                  "config_access_unknown", "uplinks_unknown"}
PCI_DEV_BOTH = {"bdf", "vendor", "device", "kind", "family", "driver", "numa", "iommu_group", "host_bridge",
                "chain", "parent", "port_type", "switch", "link", "acs", "role"}
# sysfs names and subsystem ids and the virtual-function link: text null
PCI_DEV_LIVE_ONLY = {"subsystem_vendor", "subsystem_device", "label", "rdma", "netdevs", "local_cpulist", "vf"}
# class: lspci -nn prints no prog-if (4 of sysfs's 6 digits); a GPU's model is the driver's (/proc,
# null in text); the reasons: see the test
PCI_DEV_ONE_SIDE = {"class", "model", "acs_unknown", "port_type_unknown", "unknown"}


def _pcie_live_and_text(machine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = _recorded(machine, "pcie")
    live = normalize_host({"pcie": raw})[0]["pcie"]
    host = import_texts([("lspci-tv.txt", textout.lspci_tree(raw)), ("lspci-vvv.txt", textout.lspci_verbose(raw))])
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    return live, host.facts["pcie"]


@pytest.mark.parametrize("machine", PCIE_MACHINES)
def test_imported_lspci_equals_the_live_pcie_facts(machine: str) -> None:
    live, text = _pcie_live_and_text(machine)
    assert set(live) == PCIE_BOTH | PCIE_LIVE_ONLY | PCIE_ONE_SIDE
    assert set(text) == PCIE_BOTH | PCIE_ONE_SIDE | PCIE_TEXT_ONLY
    assert _pick(text, PCIE_BOTH - {"devices", "downgraded"}) == _pick(live, PCIE_BOTH - {"devices", "downgraded"})
    # text says against whose LnkCap it judged a downgrade; the judgement is the same
    assert [{k: v for k, v in e.items() if k not in ("max_of", "evidence")} for e in text["downgraded"]] \
        == live["downgraded"]
    # the GPUs' topo -m levels; which NICs topo -m lists (those with an RDMA device) is sysfs's
    n = len(live["gpus"])
    assert [row[:n] for row in text["levels"]["matrix"][:n]] == [row[:n] for row in live["levels"]["matrix"][:n]]
    assert text["levels"]["order"][:n] == live["levels"]["order"][:n]
    counts = {"pci", "driver_loaded", "passthrough"}  # /proc's and /dev's counts are not in lspci
    assert _pick(text["gpu_counts"], counts) == _pick(live["gpu_counts"], counts)
    assert text["gpu_counts"]["proc"] is None and "/proc/driver/nvidia" in text["gpu_counts"]["unknown"]
    assert text["uplinks"] is None and text["config_access"] is None and text["virtual_platform"]["detected"] is None
    assert len(text["devices"]) == len(live["devices"]) > 0
    by = {d["bdf"]: d for d in text["devices"]}
    for ld in live["devices"]:
        td = by[ld["bdf"]]
        assert set(ld) - PCI_DEV_ONE_SIDE == set(td) - PCI_DEV_ONE_SIDE == PCI_DEV_BOTH | PCI_DEV_LIVE_ONLY
        assert _pick(td, PCI_DEV_BOTH) == _pick(ld, PCI_DEV_BOTH), ld["bdf"]
        assert td["class"] == ld["class"][:6]
        assert all(td[k] is None for k in PCI_DEV_LIVE_ONLY) and td.get("model") is None
        assert {"label", "rdma", "netdevs", "local_cpulist", "vf"} <= set(td["unknown"])
        if ld["port_type"] is not None:  # lspci printed the PCI Express capability: ACS read the same
            assert td.get("acs_unknown") == ld.get("acs_unknown")


def test_the_pcie_machines_cover_switches_acs_down_links_and_domains() -> None:
    lives = [_pcie_live_and_text(m)[0] for m in PCIE_MACHINES]
    assert sum(1 for live in lives if live["switches"]) >= 3
    assert any(live["downgraded"] for live in lives) and any(live["acs"] for live in lives)
    assert any(b and not b.startswith("0000:") for live in lives for b in live["gpus"])


# -- p2p: p2pBandwidthLatencyTest of the same machines -------------------------------------------------

# NVSwitch (H100, B300 with 7 GPUs), a hybrid cube mesh (DGX-1), bridged workstation pairs, PCI domains
# (GB200), consumer cards without peer access (RTX 4090)
BENCH_MACHINES = ["dgx-h100-04", "dgx1-v100-01", "ws-a6000-01", "gb200-01", "b300-01", "rtx4090-01"]
P2P_BOTH = {"order", "gpus", "pairs", "matrices", "summary", "mismatches", "errors", "budget_exhausted",
            "not_reached", "complete"}
# NVML's rank and NVLink status, the all-GPU host copy, DMA-BUF support, the CUDA driver, the busy
# guard, the probe's timing and its parameters are not in the sample's output: null in text (the
# guard's `ran` with ran_unknown; params name the tool and its tables)
P2P_LIVE_ONLY = {"rank", "nvml_nvlink", "all_to_host", "dmabuf", "driver", "elapsed_s"}
P2P_ONE_SIDE = {"guard", "params"}
P2P_TEXT_ONLY = {"origin", "source", "source_files", "confidence", "low_confidence_fields", "rank_unknown",
                 "nvml_nvlink_unknown", "all_to_host_unknown", "dmabuf_unknown"}
P2P_GPU_BOTH = {"index", "bus_id", "name", "model", "status", "error", "busy_processes", "local_ce_gbps"}
# host copies, the SM copy and data checks are the probe's; p2pBandwidthLatencyTest times none of them
P2P_GPU_LIVE_ONLY = {"h2d_gbps", "d2h_gbps", "local_sm_gbps", "verified"}
P2P_GPU_ONE_SIDE = {"load", "load_unknown", "unknown"}
PAIR_BOTH = {"src", "dst", "src_bus_id", "dst_bus_id", "can_access_peer", "peer_enabled", "peer_error", "staged",
             "ce_gbps", "bidir_gbps", "latency_us"}
PAIR_LIVE_ONLY = {"sm_read_gbps", "verified"}
MATRIX_BOTH = {"can_access_peer", "peer_enabled", "ce_gbps", "bidir_gbps", "latency_us"}
MATRIX_LIVE_ONLY = {"sm_read_gbps", "verified"}


def _printed(v: Any) -> Any:
    """A figure as the tools print it (two decimals); anything else as it is."""
    if isinstance(v, float):
        return round(v, 2)
    if isinstance(v, list):
        return [_printed(x) for x in v]
    if isinstance(v, dict):
        return {k: _printed(x) for k, x in v.items()}
    return v


def _p2p_live_and_text(machine: str) -> tuple[dict[str, Any], dict[str, Any]]:
    live = normalize_host({"p2p": _recorded(machine, "p2p")})[0]["p2p"]
    host = import_texts([("p2p.txt", textout.p2p_bandwidth_latency(live))])
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    return live, host.facts["p2p"]


@pytest.mark.parametrize("machine", BENCH_MACHINES)
def test_imported_p2p_bandwidth_latency_equals_the_live_p2p_facts(machine: str) -> None:
    live, text = _p2p_live_and_text(machine)
    assert set(live) == P2P_BOTH | P2P_LIVE_ONLY | P2P_ONE_SIDE
    assert set(text) == P2P_BOTH | P2P_LIVE_ONLY | P2P_ONE_SIDE | P2P_TEXT_ONLY
    assert _pick(text, P2P_BOTH - {"gpus", "pairs", "matrices", "summary"}) \
        == _pick(live, P2P_BOTH - {"gpus", "pairs", "matrices", "summary"})
    assert all(text[k] is None and text[f"{k}_unknown"] for k in ("rank", "nvml_nvlink", "all_to_host", "dmabuf"))
    assert text["driver"] is None and text["elapsed_s"] is None
    assert live["guard"]["ran"] is True and text["guard"]["ran"] is None and text["guard"]["ran_unknown"]
    summary = {"min_gbps", "min_pair", "pairs_measured"}  # host copies: the probe's (gpus_measured counts them)
    assert _pick(text["summary"], summary) == _pick(live["summary"], summary)
    assert len(text["gpus"]) == len(live["gpus"]) > 0
    for lg, tg in _pairs(live["gpus"], text["gpus"]):
        assert set(lg) - P2P_GPU_ONE_SIDE == set(tg) - P2P_GPU_ONE_SIDE == P2P_GPU_BOTH | P2P_GPU_LIVE_ONLY
        assert _pick(tg, P2P_GPU_BOTH) == _printed(_pick(lg, P2P_GPU_BOTH)), lg["index"]
        assert all(tg[k] is None and k in tg["unknown"] for k in P2P_GPU_LIVE_ONLY)
        assert "load" in lg and tg["load_unknown"] and "load" not in tg
    assert len(text["pairs"]) == len(live["pairs"]) > 0
    by_pair = {(p["src"], p["dst"]): p for p in text["pairs"]}  # the probe's order is its own: matched by pair
    for lp in live["pairs"]:
        tp = by_pair[(lp["src"], lp["dst"])]
        assert set(lp) == PAIR_BOTH | PAIR_LIVE_ONLY and set(tp) == PAIR_BOTH | PAIR_LIVE_ONLY | {"unknown"}
        assert _pick(tp, PAIR_BOTH) == _printed(_pick(lp, PAIR_BOTH)), (lp["src"], lp["dst"])
        assert tp["sm_read_gbps"] is None and tp["verified"] is None and "verified" in tp["unknown"]
    # the probe's matrices; the sample's P2P=Disabled and CPU blocks are not rendered, so none is text's own
    assert set(live["matrices"]) == set(text["matrices"]) == MATRIX_BOTH | MATRIX_LIVE_ONLY
    assert _pick(text["matrices"], MATRIX_BOTH) == _printed(_pick(live["matrices"], MATRIX_BOTH))
    n = len(live["gpus"])
    assert text["matrices"]["verified"] == [[None] * n for _ in range(n)]


def test_the_bench_machines_cover_switches_meshes_domains_and_no_peer_access() -> None:
    lives = [_p2p_live_and_text(m)[0] for m in BENCH_MACHINES]
    assert any(p["staged"] for live in lives for p in live["pairs"])  # a pair copied through the host
    assert any(b and not b.startswith("0000:") for live in lives for b in live["order"])
    slowest = [live["summary"]["min_gbps"] for live in lives]
    assert max(slowest) > 300 and min(slowest) < 30  # NVLink boxes and PCIe-only ones


# -- nccl: nccl-tests all_reduce_perf of the same machines ----------------------------------------------

NCCL_BOTH = {"version", "gpu_count", "results", "avg_busbw_gbps", "transport", "channels", "gpus", "gpu_model",
             "transports", "errors", "hang", "limitation", "complete", "busy_gpus"}
# the host's NCCL settings and whether the run kept them, the library's path and NVML's
# virtualization mode are the probe's: null in text, with the reason where the probe's field has one
NCCL_LIVE_ONLY = {"env_overrides", "env_kept", "library", "virtualization_mode"}
NCCL_ONE_SIDE = {"source", "stdout_bytes"}  # the probe's own stdout noise: nothing of nccl-tests
NCCL_TEXT_ONLY = {"origin", "source_files", "confidence", "low_confidence_fields", "ranks", "hosts",
                  "out_of_bounds", "env_overrides_unknown", "env_kept_unknown", "library_unknown"}


def _nccl_printed(r: dict[str, Any]) -> dict[str, Any]:
    """A result row as nccl-tests prints it: time to 0.1 us (whole us from 10 ms), bandwidths to 0.01 GB/s."""
    t = r["time_us"]
    return {**r, "time_us": float(round(t)) if t >= 10000 else round(t, 1), "algbw_gbps": round(r["algbw_gbps"], 2),
            "busbw_gbps": round(r["busbw_gbps"], 2)}


@pytest.mark.parametrize("machine", BENCH_MACHINES)
def test_imported_nccl_tests_equals_the_live_nccl_facts(machine: str) -> None:
    raw = _recorded(machine, "nccl")
    live = normalize_host({"nccl": raw})[0]["nccl"]
    host = import_texts([("nccl.txt", textout.nccl_tests(raw, machine))])
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    text = host.facts["nccl"]
    live_unknown = {k for k in live if k.endswith("_unknown")}  # one GPU's transport, a log without channels
    assert set(live) - live_unknown == NCCL_BOTH | NCCL_LIVE_ONLY | NCCL_ONE_SIDE
    assert set(text) - live_unknown == NCCL_BOTH | NCCL_LIVE_ONLY | NCCL_ONE_SIDE | NCCL_TEXT_ONLY
    assert _pick(text, NCCL_BOTH - {"results", "avg_busbw_gbps"}) == _pick(live, NCCL_BOTH - {"results", "avg_busbw_gbps"})
    # nccl-tests prints its average with %g (six digits); the probe's normalizer keeps three decimals
    assert round(text["avg_busbw_gbps"], 3) == live["avg_busbw_gbps"]
    assert text["results"] == [_nccl_printed(r) for r in live["results"]] and text["results"]
    assert all(text[k] is None for k in NCCL_LIVE_ONLY) and text["source"] == "nccl-tests"
    assert text["ranks"] == live["gpu_count"] and text["hosts"] == [machine] and text["out_of_bounds"] == 0


def test_the_bench_machines_cover_nvls_p2p_and_shm_transports() -> None:
    transports = {normalize_host({"nccl": _recorded(m, "nccl")})[0]["nccl"]["transport"] for m in BENCH_MACHINES}
    assert {"NVLS", "P2P", "SHM"} <= transports


# -- fabric: ib_write_bw / ib_write_lat and a multi-node nccl-tests run of the same machines ----------

# every HCA up (04), a host with an HCA fewer in its plan (18), one whose link is slow (22)
FABRIC_MACHINES = ["dgx-h100-04", "dgx-h100-18", "dgx-h100-22"]
# the figures and the whole run as printed, written by the one `fill_figures` for both roads
MEASURE_BOTH = {"test", "kind", "value", "p99_us", "size", "error", "error_kind", "link_type", "remote", "unit",
                "rows", "peak_gbps", "msg_rate_mpps", "latency", "extra", "gdr_error"}
# the plan's round, rail, peer host, peer HCA, role and CUDA buffer are the controller's: text says
# round 0 rail 0, names the peer by the LID it printed and the role unknown
MEASURE_ONE_SIDE = {"round", "rail", "hca", "peer", "peer_hca", "role", "use_cuda"}


def _fabric_results(machine: str) -> list[dict[str, Any]]:
    wave = gzip.decompress((RECORDINGS / machine / "fabric" / "wave1.stdout.gz").read_bytes()).decode()
    data: dict[str, Any] = json.loads(wave.split("\n", 2)[1])["data"]
    return [r for r in data["results"] if r["role"] == "client"]


@pytest.mark.parametrize("machine", FABRIC_MACHINES)
def test_imported_perftest_equals_the_live_fabric_measurements(machine: str) -> None:
    """What ib_write_bw / ib_write_lat printed on the machine (the recording keeps each run's
    stdout), imported, measures what the fabric normalizer read of the same run."""
    results = _fabric_results(machine)
    assert len(results) > 20 and {r["test"] for r in results} == {"ib_write_bw", "ib_write_lat"}
    for rec in results:
        live = fabric_normalize.measurement(rec)
        host = import_texts([(f"{rec['test']}.txt", rec["stdout"])])
        assert live is not None and set(host.outcomes.values()) == {"ok"}, host.outcomes
        [text] = host.facts["fabric"]["measurements"]
        assert set(live) == set(text) == MEASURE_BOTH | MEASURE_ONE_SIDE
        assert _pick(text, MEASURE_BOTH) == _pick(live, MEASURE_BOTH), (rec["round"], rec["hca"], rec["test"])
        assert live["value"] is not None and text["hca"] == live["hca"]
        assert (text["round"], text["rail"], text["role"]) == (0, 0, "unknown")
        assert text["peer"] == f"LID {rec['peer_lid']:#x}" and live["peer"] == rec["peer"]


NCCL_GROUP_BOTH = {"members", "ranks", "transport", "gdr", "busbw_gbps", "results", "wrong", "error"}
# the plan's group name, kind (all, rail), rail and HCA; text names its file, kind "text"
NCCL_GROUP_ONE_SIDE = {"group", "kind", "rail", "hca"}


@pytest.mark.parametrize("machine", BENCH_MACHINES[:3])
def test_imported_multi_node_nccl_tests_equals_the_live_fabric_group(machine: str) -> None:
    """The nccl probe's run of a machine, printed by nccl-tests as two hosts' ranks, imported as a
    fabric group equals the fabric normalizer's group of the same data."""
    raw = _recorded(machine, "nccl")
    members = [machine, machine + "-peer"]
    half = len(raw["selected"]) // 2
    text = textout.nccl_tests(raw, machine).replace(f"on {machine} device", f"on {members[1]} device")
    lines = text.splitlines()
    for i, line in enumerate(lines):  # the first half of the ranks on the first host
        if "# Using devices" in line:
            for k in range(i + 1, i + 1 + half):
                lines[k] = lines[k].replace(f"on {members[1]} device", f"on {machine} device")
    net = [f"{machine}:4242:4250 [0] NCCL INFO Channel 00/0 : 0[0] -> {half}[0] [send] via NET/IB/0/GDRDMA"]
    host = import_texts([("nccl.txt", "\n".join(lines[:4] + net + lines[4:]) + "\n")])
    assert set(host.outcomes.values()) == {"ok"}, host.outcomes
    [text_group] = host.facts["fabric"]["nccl"]
    data = dict(raw, comm={"nranks": len(raw["selected"])}, debug_lines=[*net, *raw["debug_lines"]])
    [live] = fabric_normalize.normalize({"nccl": [{"group": "all", "kind": "all", "members": members,
                                                   "data": data}]})["nccl"]
    assert set(live) == set(text_group) == NCCL_GROUP_BOTH | NCCL_GROUP_ONE_SIDE
    assert _pick(text_group, NCCL_GROUP_BOTH - {"results"}) == _printed(_pick(live, NCCL_GROUP_BOTH - {"results"}))
    assert text_group["results"] == [_nccl_printed(r) for r in live["results"]]
    assert live["transport"] == "NET/IB/GDRDMA" and live["gdr"] is True and live["busbw_gbps"]
    assert text_group["kind"] == "text" and text_group["group"] == "text0:nccl.txt"


# -- gpus: nvidia-smi -q of the same machines ---------------------------------------------------------

# 8 H100 on NVSwitch, a MIG-on pass-through VM, a V100 box without MIG, a GB200 tray (PCI domain
# 0008, fabric state), workstation cards with fans, a 4090 box with two fans per card
GPU_MACHINES = ["dgx-h100-04", "vm-a100-01", "dgx1-v100-01", "gb200-01", "ws-a6000-01", "rtx4090-01"]
GPUS_BOTH = {"driver_version", "cuda_driver_version", "count", "order", "list", "mig_enabled_any", "virtualized"}
# NVML's version, topology levels, peer capabilities and the symbols the probe missed are not in -q
# (levels and p2p are topo -m's and topo -p2p's: tested above); pairs_unknown is empty on both
GPUS_LIVE_ONLY = {"nvml_version", "levels", "p2p", "missing_symbols"}
GPUS_BOTH_EMPTY = {"pairs_unknown"}
GPUS_TEXT_ONLY = {"origin", "source", "source_files", "confidence", "low_confidence_fields", "count_sources", "notes",
                  "nvml_version_unknown", "levels_unknown"}
GPU_FIELDS_BOTH = {"index", "bus_id", "uuid", "name", "model", "serial", "board_part_number", "vbios", "pci_device_id",
                   "architecture", "persistence_mode", "compute_mode", "virtualization_mode", "temperature_c",
                   "power_w", "minor_number", "pcie_replays", "inforom_image", "remapped_rows", "fans_unknown"}
# nvidia-smi -q prints memory in MiB: equal to the MiB
GPU_FIELDS_MIB = {"memory_total_bytes", "memory_used_bytes"}
# compared key by key below: what -q prints of each (ECC's counts, the link, MIG modes and
# instances' memory, the fabric's state; -q prints one fan speed)
GPU_FIELDS_PART = {"ecc", "pcie", "mig", "fabric", "fans"}
# NVML's: the CUDA capability, the clock event bits, violation times, thermal thresholds, power
# limits, the recovery action, retired pages; NUMA node and CPU affinity are topo -m's (above)
GPU_FIELDS_LIVE_ONLY = {"compute_capability", "clock_event_reasons", "clock_event_reason_names", "violation_ns",
                        "thermal", "power_limits", "recovery_action", "retired_pages_pending", "numa_node",
                        "cpu_affinity"}
# text cannot tell a lost GPU from a missing one: None with its reason (live: False)
GPU_FIELDS_ONE_SIDE = {"lost", "unknown"}
# what -q prints that the probe does not read; `display` comes from the model table
GPU_FIELDS_TEXT_ONLY = {"display", "module_id", "c2c_mode", "bar1_total_bytes", "addressing_mode", "power_limit_w",
                        "module_power_w", "memory_temperature_c", "perf_state", "utilization_pct"}
ECC_BOTH = {"mode_current", "volatile_uncorrected", "aggregate_uncorrected", "aggregate_corrected"}
PCIE_LINK_BOTH = {"gen_current", "gen_max", "gen_gpu_max", "width_current", "width_max", "speed_current", "speed_max"}
FABRIC_BOTH = {"state", "status", "clique_id", "cluster_uuid"}


# `nvidia-smi -q` and `-q -x` of the same machine: the same fields, as text and as XML
QUERY_FORMATS = {"q": ("q.txt", textout.smi_query), "q_x": ("q.xml", textout.smi_query_xml)}


def _gpus_live_and_text(machine: str, fmt: str = "q") -> tuple[dict[str, Any], dict[str, Any]]:
    raw = _recorded(machine, "nvml")
    live = normalize_host({"nvml": raw})[0]["gpus"]
    name, render = QUERY_FORMATS[fmt]
    host = import_texts([(name, render(raw))])
    assert set(host.outcomes.values()) == {"ok"} and not host.errors, (host.outcomes, host.errors)
    assert [f.kind for f in host.files] == [{"q": "smi_query", "q_x": "smi_query_xml"}[fmt]]
    return live, host.facts["gpus"]


def _fields(g: dict[str, Any]) -> set[str]:
    """A GPU record's fields less the `<field>_unknown` reasons (each side words its own), fans'
    reason kept: it is NVML's code on both sides."""
    return {k for k in g if not k.endswith("_unknown") or k == "fans_unknown"}


def _mib(v: Any) -> Any:
    return None if v is None else v // 2**20


@pytest.mark.parametrize("fmt", list(QUERY_FORMATS))
@pytest.mark.parametrize("machine", GPU_MACHINES)
def test_imported_smi_q_equals_the_live_gpus_facts(machine: str, fmt: str) -> None:
    live, text = _gpus_live_and_text(machine, fmt)
    assert set(live) == GPUS_BOTH | GPUS_LIVE_ONLY | GPUS_BOTH_EMPTY
    assert set(text) - {"mig_enabled_any_unknown", "virtualized_unknown"} == (
        GPUS_BOTH | GPUS_LIVE_ONLY | GPUS_BOTH_EMPTY | GPUS_TEXT_ONLY)
    assert _pick(text, GPUS_BOTH - {"list"}) == _pick(live, GPUS_BOTH - {"list"})
    assert text["levels"] is None and text["p2p"] == {} and text["pairs_unknown"] == live["pairs_unknown"] == {}
    assert len(text["list"]) == len(live["list"]) > 0
    for lg, tg in _pairs(live["list"], text["list"]):
        both = GPU_FIELDS_BOTH | GPU_FIELDS_MIB | GPU_FIELDS_PART
        assert _fields(lg) == both | GPU_FIELDS_LIVE_ONLY | GPU_FIELDS_ONE_SIDE, sorted(_fields(lg) ^ both)
        assert _fields(tg) == both | GPU_FIELDS_LIVE_ONLY | GPU_FIELDS_ONE_SIDE | GPU_FIELDS_TEXT_ONLY
        assert _pick(tg, GPU_FIELDS_BOTH) == _pick(lg, GPU_FIELDS_BOTH), lg["index"]
        assert {k: _mib(tg[k]) for k in GPU_FIELDS_MIB} == {k: _mib(lg[k]) for k in GPU_FIELDS_MIB}
        _same_parts(lg, tg)
        # what -q cannot show is null and named, never a guess
        assert all(tg[k] is None and f"{k}_unknown" in tg for k in GPU_FIELDS_LIVE_ONLY - {"clock_event_reason_names"})
        assert lg["lost"] is False and tg["lost"] is None and "lost" in tg["unknown"]


def _same_parts(lg: dict[str, Any], tg: dict[str, Any]) -> None:
    for key, keys in (("ecc", ECC_BOTH), ("pcie", PCIE_LINK_BOTH), ("fabric", FABRIC_BOTH)):
        assert (lg[key] is None) == (tg[key] is None), (lg["index"], key)
        if lg[key] is not None:
            assert _pick(tg[key], keys) == _pick(lg[key], keys), (lg["index"], key)
    assert (lg["mig"] is None) == (tg["mig"] is None)
    if lg["mig"] is not None:
        assert _pick(tg["mig"], {"current", "pending"}) == _pick(lg["mig"], {"current", "pending"})
        assert [(m["index"], _mib(m["memory_total_bytes"])) for m in tg["mig"]["instances"]] == \
            [(m["index"], _mib(m["memory_total_bytes"])) for m in lg["mig"]["instances"]]
    # -q prints the first fan's speed (a board's fans turn together); NOT_SUPPORTED on both sides
    assert (lg["fans"] or [None])[0] == (tg["fans"] or [None])[0]


def test_the_gpu_machines_cover_mig_fans_domains_fabric_and_no_mig() -> None:
    lives = [_gpus_live_and_text(m)[0] for m in GPU_MACHINES]
    gpus = [g for live in lives for g in live["list"]]
    assert any(live["mig_enabled_any"] for live in lives) and any(g["mig"] is None for g in gpus)
    assert any(g["fans"] for g in gpus) and any(g["fans_unknown"] == "NOT_SUPPORTED" for g in gpus)
    assert any(g["fabric"] for g in gpus) and any(not b.startswith("0000:") for live in lives for b in live["order"])
    assert any(live["virtualized"] for live in lives)


# the default screen of the same machines: what its three rows per GPU print
SCREEN_BOTH = {"index", "bus_id", "name", "model", "persistence_mode", "temperature_c", "compute_mode", "fans_unknown"}
# not on the screen: null in text with a reason (virtualization: -q's; the link: -q's or lspci's)
SCREEN_NOT_SHOWN = {"uuid", "serial", "vbios", "board_part_number", "pci_device_id", "architecture", "minor_number",
                    "pcie_replays", "inforom_image", "virtualization_mode", "remapped_rows", "fabric",
                    "compute_capability", "numa_node", "cpu_affinity"}


@pytest.mark.parametrize("machine", GPU_MACHINES)
def test_imported_default_screen_equals_the_live_gpus_facts_where_it_shows_them(machine: str) -> None:
    raw = _recorded(machine, "nvml")
    live = normalize_host({"nvml": raw})[0]["gpus"]
    host = import_texts([("screen.txt", textout.smi_screen(raw))])
    assert set(host.outcomes.values()) == {"ok"} and not host.errors, (host.outcomes, host.errors)
    text = host.facts["gpus"]
    assert _pick(text, GPUS_BOTH - {"list", "virtualized"}) == _pick(live, GPUS_BOTH - {"list", "virtualized"})
    assert text["virtualized"] is None and "virtualized_unknown" in text  # the screen does not print the mode
    for lg, tg in _pairs(live["list"], text["list"]):
        assert _pick(tg, SCREEN_BOTH) == _pick(lg, SCREEN_BOTH), lg["index"]
        assert {k: _mib(tg[k]) for k in GPU_FIELDS_MIB} == {k: _mib(lg[k]) for k in GPU_FIELDS_MIB}
        assert tg["power_w"] == round(lg["power_w"])  # the screen prints whole watts
        assert (lg["fans"] or [None])[0] == (tg["fans"] or [None])[0]
        assert (tg["mig"] is None) == (lg["mig"] is None)
        if lg["mig"] is not None:  # the MIG column: the mode, not the instances (the MIG box is not rendered)
            assert _pick(tg["mig"], {"current", "pending"}) == _pick(lg["mig"], {"current", "pending"})
        assert tg["ecc"]["mode_current"] == lg["ecc"]["mode_current"]
        if not (lg["mig"] or {}).get("current"):  # with MIG on the column says `On`, no count
            assert tg["ecc"]["volatile_uncorrected"] == lg["ecc"]["volatile_uncorrected"]
        assert all(tg[k] is None for k in SCREEN_NOT_SHOWN), [k for k in SCREEN_NOT_SHOWN if tg[k] is not None]
        assert all(tg["pcie"][k] is None for k in PCIE_LINK_BOTH)
