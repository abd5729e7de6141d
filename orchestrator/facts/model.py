"""The normalized facts as types: one `TypedDict` per facts section and per record inside it.

Types only, no run-time cost: a TypedDict is a plain dict at run time, so fleet.json stays
byte-identical.  They let mypy check every writer (facts/normalize/*, facts/textparse/facts.py)
and every reader (checks, views, report, outputs, drift, classes) against one description; the
prose and examples stay in docs/facts-*.md, the section <-> probe table in facts/registry.py.

Conventions (docs/architecture.md): a value nobody could read is `None` with a
`"<field>_unknown": "reason"` key beside it, declared here as `NotRequired` so a reader can ask
for the reason.  Keys only a text import can fill (it knows the printed speed of a link, a
display GPU) are `NotRequired` too: a live probe leaves them out, it never writes them empty.
"""

from __future__ import annotations

import sys
from typing import Any, Union

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # NotRequired is 3.11+; typing_extensions' TypedDict is the one that understands it
    from typing_extensions import NotRequired, TypedDict


# Provenance every section imported from text carries (facts/textparse/facts.py:_mark).
class TextOrigin(TypedDict, total=False):
    origin: str  # "text"
    source_files: list[str]
    confidence: str  # "low" | "normal"
    low_confidence_fields: list[str]
    notes: list[str]


# What a text import's section names as its producer: "text", or the benchmark tool for p2p and
# nccl.  Not on TextOrigin itself: the topology section's `source` is its per-cell matrix.
class TextSource(TextOrigin, total=False):
    source: str


# ---------------------------------------------------------------------------------------------
# facts["host"] (docs/facts-host.md)

DmiValue = Union[str, dict[str, Any], None]  # {"unknown": reason} where only root may read it


class HostCpu(TypedDict):
    model: str | None
    sockets: int | None
    cores: int | None
    threads: int | None


class HostBoard(TypedDict):
    system_vendor: DmiValue
    product: DmiValue
    vendor: DmiValue
    model: DmiValue
    version: DmiValue
    bios_vendor: DmiValue
    bios_version: DmiValue
    bios_date: DmiValue
    system_serial: DmiValue
    board_serial: DmiValue
    system_uuid: DmiValue


class HostVirtualization(TypedDict):
    virtualized: bool
    hypervisor: str | None
    container: str | None
    evidence: list[str]


class HostDriver(TypedDict):
    loaded: bool
    version: str | None


class HostFabricManager(TypedDict):
    installed: bool
    package: str | None  # nvidia-fabricmanager-550
    version: str | None  # without the package revision: "550.54.15"


class HostFacts(TypedDict):
    hostname: str | None
    os: str | None
    kernel: str | None
    arch: str | None
    cpu: HostCpu
    memory_gib: float | None
    numa_nodes: int | None
    board: HostBoard
    virtualization: HostVirtualization
    driver: HostDriver
    python: str | None
    fabric_manager: NotRequired[HostFabricManager | None]  # None: no dpkg database to ask
    # host 1.2: seconds since boot (/proc/uptime), and the processes holding /dev/nvidia*
    # ({"holders": [{pid, command, state, devices, stuck?, wchan?}], "unreadable": n, "scanned": n});
    # absent from an older probe's answer and from text imports
    uptime_s: NotRequired[float | None]
    gpu_processes: NotRequired[dict[str, Any] | None]


# ---------------------------------------------------------------------------------------------
# facts["gpus"] (docs/facts-gpus.md)

Matrix = list[list[Any]]  # n x n over the section's `order`


class GpuPcie(TypedDict):
    gen_current: int | None
    gen_max: int | None
    gen_gpu_max: int | None
    gen_host_max: NotRequired[int | None]  # nvidia-smi -q "Host Max" (text imports)
    width_current: int | None
    width_max: int | None
    speed_current: str | None
    speed_max: str | None
    gen_current_unknown: NotRequired[str]
    gen_max_unknown: NotRequired[str]
    gen_gpu_max_unknown: NotRequired[str]
    width_current_unknown: NotRequired[str]
    width_max_unknown: NotRequired[str]
    gen_host_max_unknown: NotRequired[str]


class GpuMig(TypedDict):
    current: bool | None
    pending: bool | None
    instances: list[dict[str, Any]]
    current_unknown: NotRequired[str]
    pending_unknown: NotRequired[str]


class GpuRecord(TypedDict):
    index: int | None
    bus_id: str | None
    uuid: str | None
    name: str | None
    model: str | None
    serial: str | None
    board_part_number: str | None
    vbios: str | None
    pci_device_id: str | None
    memory_total_bytes: int | None
    memory_used_bytes: int | None
    architecture: str | None
    compute_capability: str | None
    persistence_mode: bool | None
    compute_mode: str | None
    mig: GpuMig | None
    virtualization_mode: str | None
    pcie: GpuPcie | None
    numa_node: int | None
    cpu_affinity: str | None
    temperature_c: float | None
    fans: list[dict[str, Any]] | None
    fans_unknown: str | None
    power_w: float | None
    ecc: dict[str, Any] | None
    remapped_rows: dict[str, Any] | None
    fabric: dict[str, Any] | None
    lost: bool | None  # None: a text import cannot tell a lost GPU from a missing one
    unknown: dict[str, Any]
    minor_number: NotRequired[int | None]
    bus_id_unknown: NotRequired[str]
    uuid_unknown: NotRequired[str]
    serial_unknown: NotRequired[str]
    mig_unknown: NotRequired[str]
    ecc_unknown: NotRequired[str]
    remapped_rows_unknown: NotRequired[str]
    fabric_unknown: NotRequired[str]
    # live probe (nvml 1.1): limits in W, the raw nvmlClocksEventReason bitmask and its names,
    # NVML's PCIe replay counter, dynamic page retirement waiting for a reset (before Ampere)
    power_limits: NotRequired[dict[str, Any] | None]
    power_limits_unknown: NotRequired[str]
    clock_event_reasons: NotRequired[int | None]
    clock_event_reasons_unknown: NotRequired[str]
    clock_event_reason_names: NotRequired[list[str] | None]
    pcie_replays_unknown: NotRequired[str]
    retired_pages_pending: NotRequired[bool | None]
    retired_pages_pending_unknown: NotRequired[str]
    # text imports (and the live probe since nvml 1.1)
    pcie_replays: NotRequired[int | None]
    # text imports only
    display: NotRequired[bool | None]
    module_id: NotRequired[int | None]
    numa_affinity: NotRequired[Any]
    # nvidia-smi -q fields the nvml probe does not read yet (null + unknown reason when not printed)
    c2c_mode: NotRequired[str | None]
    bar1_total_bytes: NotRequired[int | None]
    addressing_mode: NotRequired[str | None]
    power_limit_w: NotRequired[float | None]
    module_power_w: NotRequired[float | None]
    memory_temperature_c: NotRequired[float | None]
    # the default nvidia-smi screen (issue 48): its Perf and GPU-Util columns
    perf_state: NotRequired[str | None]
    utilization_pct: NotRequired[int | None]
    # live probe (nvml 1.2, issue 18): cumulative violation time per performance policy (ns since
    # the driver loaded, `reference_us` the CPU timestamp of the reading), the temperature
    # thresholds and margin, and NVML's GPU recovery action (R570+; None with a reason before)
    violation_ns: NotRequired[dict[str, Any] | None]
    violation_ns_unknown: NotRequired[str]
    thermal: NotRequired[dict[str, Any] | None]
    thermal_unknown: NotRequired[str]
    recovery_action: NotRequired[str | None]
    recovery_action_unknown: NotRequired[str]
    # live probe (nvml 1.3) and nvidia-smi -q text: the InfoROM image version ("G520.0200.00.05")
    inforom_image: NotRequired[str | None]
    inforom_image_unknown: NotRequired[str]


class GpusFacts(TextSource):
    driver_version: str | None
    nvml_version: str | None
    cuda_driver_version: str | None
    count: int | None
    list: list[GpuRecord]
    order: list[str | None]
    levels: Matrix | None
    p2p: dict[str, Matrix]
    mig_enabled_any: bool | None
    virtualized: bool | None
    pairs_unknown: NotRequired[dict[str, Any]]
    missing_symbols: NotRequired[list[str]]
    driver_version_unknown: NotRequired[str]
    nvml_version_unknown: NotRequired[str]
    cuda_driver_version_unknown: NotRequired[str]
    count_unknown: NotRequired[str]
    # a source that names why it cannot tell (text: no topo -m; a GPU whose MIG or virtualization
    # mode it does not print): the value is null beside its reason
    levels_unknown: NotRequired[str]
    mig_enabled_any_unknown: NotRequired[str]
    virtualized_unknown: NotRequired[str]
    # text imports: which file kind gave which count (provenance of `count`; disagreements are notes)
    count_sources: NotRequired[dict[str, int]]
    # an excerpt (nvlink -s -i N, part of a paste): count is null, this is the lower bound
    count_at_least: NotRequired[int]
    # the default nvidia-smi screen's Processes box: [{gpu, pid, type, name, memory_used_bytes}]
    processes: NotRequired[list[dict[str, Any]]]
    # driver calls that did not return within their share of the probe's deadline (a wedged
    # driver): [{call, subject, waited_s, limit_s}]; the probe answered without them
    unresponsive: NotRequired[list[dict[str, Any]]]


# ---------------------------------------------------------------------------------------------
# facts["nvlink"] (docs/facts-gpus.md)


class NvlinkLink(TypedDict):
    link: int | None
    state: str | None  # "up" | "down" | None
    version: str | None
    remote_bus_id: str | None
    remote_type: str | None  # "gpu" | "nvswitch" | "ibmnpu" | "unknown" | None
    p2p_supported: bool | None
    sysmem_access: bool | None
    p2p_atomics: bool | None
    errors: dict[str, Any] | None
    unknown: dict[str, Any]
    speed_gbps: NotRequired[float | None]  # text imports: what `nvlink -s` printed
    # nvlink -c capabilities the nvml probe does not read (text imports)
    sysmem_atomics: NotRequired[bool | None]
    sli_supported: NotRequired[bool | None]
    link_supported: NotRequired[bool | None]


class NvlinkGpu(TypedDict):
    index: int | None
    bus_id: str | None
    uuid: str | None
    name: str | None
    links_total: int | None
    links_up: int | None
    inactive: list[int | None] | None
    version: str | None
    lost: NotRequired[bool]
    links: list[NvlinkLink]
    unknown: dict[str, Any]


class NvlinkPair(TypedDict):
    a: str | None
    b: str | None
    links: int


class NvSwitch(TypedDict):
    bus_id: str
    links: int
    links_up: int
    gpus: list[str | None]


class NvlinkFacts(TextSource):
    supported: bool | None
    order: list[str | None]
    gpus: list[NvlinkGpu]
    pairs: list[NvlinkPair] | None
    nvswitches: list[NvSwitch] | None
    nv: list[list[int | None]] | None
    links_total: int | None
    links_up_total: int | None
    driver_version: NotRequired[str | None]
    pairs_unknown: NotRequired[str]
    nvswitches_unknown: NotRequired[str]
    gpus_unknown: NotRequired[str]
    unresponsive: NotRequired[list[dict[str, Any]]]  # as GpusFacts.unresponsive


# ---------------------------------------------------------------------------------------------
# facts["topology"] (docs/facts-gpus.md)


class TopologyDevice(TypedDict):
    name: str
    kind: str  # "gpu" | "nic"
    bus_id: str | None
    cpu_affinity: NotRequired[str | None]
    numa: NotRequired[int | None]
    numa_nodes: NotRequired[str]  # text imports: NUMA Affinity printed as several nodes ("0,3-9,11-17")
    label: NotRequired[str | None]
    gpu_numa_id: NotRequired[Any]
    unknown: NotRequired[dict[str, Any]]


class TopologyFacts(TextOrigin):
    devices: list[TopologyDevice]
    matrix: list[list[str | None]]
    source: list[list[str | None]] | str
    legend_style: NotRequired[Any]
    nearest_gpus_by_cpu: NotRequired[dict[str, Any] | None]
    matrix_unknown: NotRequired[str]  # topo -c alone: the GPUs exist, their path levels are unknown


# ---------------------------------------------------------------------------------------------
# facts["pcie"] (docs/facts-pcie.md)


class PcieLink(TypedDict):
    gen_current: int | None
    gen_max: int | None
    speed_current: str | None
    speed_max: str | None
    width_current: int | None
    width_max: int | None
    downgraded: NotRequired[bool]
    lspci_marks: NotRequired[dict[str, Any]]
    max_of: NotRequired[str]  # text imports: "device" (only its own LnkCap known) | "link" (both ends)


class PcieDevice(TypedDict, total=False):
    # total=False: the normalizer builds devices key by key; readers use .get()
    bdf: str  # always set: normalize/pcie.py drops a device without a valid bus id, text imports key by it
    vendor: str | None
    device: str | None
    subsystem_vendor: str | None
    subsystem_device: str | None
    kind: str | None
    kind_source: str | None  # text imports: "name" when read from lspci -tv's device name
    family: str | None
    label: str | None
    netdevs: list[str] | None
    rdma: str | None
    driver: str | None
    numa: int | None
    local_cpulist: str | None
    iommu_group: int | None
    host_bridge: str | None
    chain: list[str]
    parent: str | None
    port_type: str | None
    port_type_unknown: str | None
    role: str | None
    model: str | None
    switch: str | None
    link: PcieLink | None
    acs: dict[str, Any] | None
    acs_unknown: str | None
    vf: bool | None
    unknown: dict[str, Any]


class PcieFacts(TextSource):
    config_access: str | None
    needs_root: list[str] | None
    virtual_platform: dict[str, Any]
    devices: list[PcieDevice]
    tree: list[dict[str, Any]] | None
    gpus: list[str] | None
    nics: list[str] | None
    nvswitches: list[str] | None
    nvme: list[str] | None
    switches: list[dict[str, Any]] | None
    uplinks: list[dict[str, Any]] | None
    levels: dict[str, Any] | None
    downgraded: list[dict[str, Any]]
    acs: list[dict[str, Any]]
    gpu_counts: dict[str, Any]
    nvswitch_nodes: NotRequired[int]
    iommu: NotRequired[Any]
    config_access_unknown: NotRequired[str]
    uplinks_unknown: NotRequired[str]
    gpus_unknown: NotRequired[str]
    # pcie 1.1 (issue 18): the AER counters of each link on a GPU's or NIC's upstream chain
    aer_links: NotRequired[list[AerLink]]


class AerEnd(TypedDict):
    """One end's AER counters by kind, only those above zero (None: the kind's file is missing)."""
    device: str
    correctable: dict[str, int] | None  # {"RxErr": 3, "TOTAL_ERR_COR": 3}
    nonfatal: dict[str, int] | None
    fatal: dict[str, int] | None


class AerLink(TypedDict):
    """One PCIe link of a GPU's or NIC's upstream chain and the AER counts (since boot) of its two
    ends: errors are often counted at the link partner (the switch or root port above)."""
    device: str  # the upstream-facing end: the endpoint, or a switch's upstream port
    kind: str | None
    partner: str | None  # the port above (root or switch downstream port); None when there is none
    serves: list[str]  # the GPUs / NICs whose chain the link is on
    gen_current: int | None
    width_current: int | None
    speed_current: str | None
    correctable: int | None  # both ends summed; None when neither end reports AER
    nonfatal: int | None
    fatal: int | None
    ends: list[AerEnd]  # the ends that report AER: the device, then its partner


# ---------------------------------------------------------------------------------------------
# facts["p2p"] (docs/facts-p2p.md)


class P2pGpu(TypedDict):
    index: int
    bus_id: str | None  # None: a benchmark's text that names no bus id (text imports)
    name: str | None
    model: str | None
    status: str | None
    error: Any
    busy_processes: Any
    h2d_gbps: float | None
    d2h_gbps: float | None
    local_ce_gbps: float | None
    local_sm_gbps: float | None
    verified: bool | None
    # p2p 1.1: NVML's SM clock (MHz), power (W) and temperature (C) read while the probe ran the SM
    # copy kernel back to back on the GPU; absent when not read (load_unknown says why, where known)
    load: NotRequired[dict[str, Any] | None]
    load_unknown: NotRequired[str]
    unknown: NotRequired[dict[str, str]]  # text imports: field -> why the tool's output cannot say


class P2pFacts(TextSource):
    order: list[str | None]  # None: a benchmark's text that names no bus id (text imports)
    summary: dict[str, Any]
    driver: str | None
    gpus: list[P2pGpu]
    pairs: list[dict[str, Any]]
    matrices: dict[str, list[list[Any]]]
    rank: Any
    nvml_nvlink: Any
    all_to_host: Any
    mismatches: list[dict[str, Any]]
    guard: dict[str, Any]
    errors: list[dict[str, Any]]
    budget_exhausted: bool
    not_reached: list[Any]
    complete: bool
    params: dict[str, Any]
    elapsed_s: float | None
    rank_unknown: NotRequired[str]  # text imports: what a benchmark's output cannot say
    nvml_nvlink_unknown: NotRequired[str]
    all_to_host_unknown: NotRequired[str]
    dmabuf_unknown: NotRequired[str]
    # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED per GPU bus id (issue 18); None when not read
    dmabuf: NotRequired[dict[str, bool | None] | None]


# ---------------------------------------------------------------------------------------------
# facts["nccl"] (docs/facts-nccl.md): the nccl probe, or nccl-tests output imported as text


class NcclResult(TypedDict):
    op: str | None  # "all_reduce" | "all_gather" | "reduce_scatter" | "alltoall" | "broadcast" | "sendrecv"; None: text names none
    size_bytes: int
    count: int | None  # elements
    dtype: str | None  # nccl-tests' names: "float", "half", ...
    redop: str | None  # "sum", ... (None where the op has none)
    time_us: float | None  # per iteration
    algbw_gbps: float | None  # size / time
    busbw_gbps: float | None  # algbw x the op's bus factor (all_reduce: 2(n-1)/n)
    in_place: bool
    wrong: int | None  # elements that differ from the expected result (None: not checked)


class NcclFacts(TextOrigin):
    version: str | None
    gpu_count: int | None
    results: list[NcclResult]
    avg_busbw_gbps: float | None  # mean busbw over the sizes, nccl-tests' "Avg bus bandwidth"
    transport: str | None  # NVLS | P2P | SHM | NET, from NCCL's INFO log
    source: str  # "probe" | "nccl-tests"
    # the probe's NCCL INFO log and the host's settings (nccl-tests text prints neither)
    channels: NotRequired[int | None]  # coll channels
    # NCCL settings of the host (environment over conf files); None: a text import cannot see them
    env_overrides: NotRequired[dict[str, str] | None]
    # what only nccl-tests output knows
    ranks: NotRequired[int | None]
    ranks_at_least: NotRequired[int]  # the rank lines were trimmed: a lower bound, `ranks` None (issue 48)
    hosts: NotRequired[list[str]]
    out_of_bounds: NotRequired[int | None]  # "# Out of bounds values : N"
    avg_busbw_note: NotRequired[str]
    out_of_bounds_unknown: NotRequired[str]
    version_unknown: NotRequired[str]
    gpu_count_unknown: NotRequired[str]
    avg_busbw_gbps_unknown: NotRequired[str]
    transport_unknown: NotRequired[str]
    channels_unknown: NotRequired[str]
    env_overrides_unknown: NotRequired[str]
    env_kept_unknown: NotRequired[str]
    library_unknown: NotRequired[str]
    # what only the probe knows
    gpus: NotRequired[list[str]]  # bus ids of the ranks
    gpu_model: NotRequired[str | None]
    transports: NotRequired[list[str]]  # every transport a channel used
    env_kept: NotRequired[bool | None]  # measured under the host's settings (keep_env); None: text cannot say
    library: NotRequired[str | None]
    errors: NotRequired[list[dict[str, Any]]]
    hang: NotRequired[dict[str, Any] | None]
    limitation: NotRequired[str | None]
    complete: NotRequired[bool]
    stdout_bytes: NotRequired[int]
    virtualization_mode: NotRequired[int | None]  # NVML's: 0 none, 1 pass-through, 2 vGPU guest, 3/4 host
    busy_gpus: NotRequired[list[str]]  # bus ids the busy guard left out of the communicator


# ---------------------------------------------------------------------------------------------
# facts["kmsg"] (docs/facts-kmsg.md)


class KmsgAttempt(TypedDict):
    source: str  # journalctl | kmsg | dmesg
    error: str


class KmsgEvent(TypedDict):
    kind: str  # xid | sxid | fallen_off_bus | aer | mlx5 | peermem | segfault
    t: float | None  # seconds since boot
    wall: float | None  # epoch seconds, where the source has them (journald; text that printed its zone)
    when: NotRequired[str]  # the wall clock as printed, ISO 8601 (`--MM-DDThh:mm:ss` without a year); absent: none printed
    bus_id: str | None
    bus_id_unknown: NotRequired[str]  # the line named its device in another form (a poster's `PCI:...`)
    code: int | None  # Xid / SXid code
    text: str
    key: str  # names the event within its boot: kind|t|bus|code
    pid: NotRequired[int | None]
    process: NotRequired[str | None]
    severity: NotRequired[str | None]  # Xid/SXid: fatal|nonfatal where the line says; AER: its severity text
    action: NotRequired[str | None]  # Xid: facts/xid.py ACTIONS, None for a code the table lacks
    device: NotRequired[str]  # nvidia-nvswitchN, netdev name
    driver: NotRequired[str]  # AER: the reporting driver (pcieport, nvidia, mlx5_core)
    error_type: NotRequired[str]  # AER: Physical Layer, Data Link Layer, Transaction Layer
    subtype: NotRequired[str]  # mlx5: slot_power | module_temperature | asic_temperature | tx_timeout | health_compromised
    library: NotRequired[str]  # segfault: libnccl.so.2 / libcuda.so.1
    link: NotRequired[int]  # SXid and NVLink Xid lines: the link number they print
    port: NotRequired[str]  # AER: the port that reported it (its "error received" line)


class KmsgFacts(TextOrigin):
    readable: bool
    source: str | None
    unreadable_reason: str | None  # what was tried and why it failed
    attempts: list[KmsgAttempt]
    boot_id: str | None
    boot_time: int | None  # epoch seconds (/proc/stat btime)
    uid: int | None  # who read it
    events: list[KmsgEvent]
    lines_scanned: int | None
    truncated: bool  # more matching lines than the probe keeps: the oldest were dropped


# ---------------------------------------------------------------------------------------------
# facts["nic"] (docs/facts-nic.md)


class NicPort(TypedDict):
    port: int
    link_layer: str | None  # InfiniBand | Ethernet
    state: str | None  # ACTIVE, DOWN, INIT, ARMED (the text after "N: ")
    phys_state: str | None  # LinkUp, Polling, Disabled ...
    rate_gbps: float | None
    rate: str | None  # the kernel's text: "400 Gb/sec (4X NDR)"
    netdev: str | None  # the net interface of this port (RoCE / IPoIB)
    counters: dict[str, int]  # ports/N/counters
    hw_counters: dict[str, int]  # ports/N/hw_counters
    port_guid: NotRequired[str | None]  # ibstat's Port GUID; sysfs: the interface id of GID 0 (probe nic 1.2+)
    active_mtu: NotRequired[int | None]  # ibv_devinfo text only (sysfs has no file for it)
    max_mtu: NotRequired[int | None]


class NicDevice(TypedDict):
    name: str  # mlx5_0
    bus_id: str | None  # its PCI function (joins facts["pcie"])
    hca_type: str | None
    board_id: str | None
    fw_ver: str | None
    node_guid: str | None
    driver: str | None
    ports: list[NicPort]
    sys_image_guid: NotRequired[str | None]  # one value for the HCAs of one adapter (probe nic 1.2+)
    model: NotRequired[str | None]  # the product of hca_type (gpu_models.NIC_MODELS): "ConnectX-8"
    error: NotRequired[str]  # the HCA could not be read (ibstat: "stat of IB device ... failed")


class NetDev(TypedDict):
    name: str
    bus_id: str | None
    driver: str | None
    operstate: str | None
    carrier: bool | None
    speed_mbps: int | None  # None: no link or not reported (-1 in sysfs)
    carrier_changes: int | None
    mtu: int | None


class NicGdr(TypedDict):
    peermem_loaded: bool  # a GPU peer-memory client is loaded (GPUDirect RDMA the classic way)
    module: str | None  # nvidia_peermem | nv_peer_mem
    memory_peers: list[str] | None  # /sys/kernel/mm/memory_peers (MLNX_OFED), None when absent


class NicFacts(TextSource):
    devices: list[NicDevice]  # /sys/class/infiniband
    netdevs: list[NetDev]  # /sys/class/net entries backed by a PCI function
    infiniband_present: bool
    unknown: NotRequired[dict[str, str]]  # text imports: what ibstat/ibv_devinfo text cannot give
    gdr: NotRequired[NicGdr | None]  # None: not read (text imports, probe nic 1.0)


# ---------------------------------------------------------------------------------------------
# facts["fabric"] (docs/facts-fabric.md): the host's part of a multi-host fabric qualification


class FabricLink(TypedDict):
    speed: str | None  # "32.0 GT/s PCIe", as sysfs prints it
    width: int | None
    max_speed: str | None
    max_width: int | None


class FabricHca(TypedDict):
    hca: str  # mlx5_0
    port: int | None
    rail: int | None  # the rail this port serves in the plan; None: not used
    state: str | None  # ACTIVE ...
    link_layer: str | None
    rate: str | None  # the kernel's text: "400 Gb/sec (4X NDR)"
    rate_gbps: float | None  # active rate
    width: int | None  # active width in lanes (4X -> 4)
    lid: str | None
    port_guid: str | None  # the low 64 bits of GID 0
    node_guid: str | None
    bus_id: str | None
    pcie: FabricLink | None
    numa_node: int | None
    nearest_gpu: str | None  # bus id of the GPU sharing the most PCIe path with it
    address: str | None  # the address its peers dialled


class PerftestAddress(TypedDict):
    """One end of a perftest run as its `local address:` / `remote address:` lines print it."""

    lid: int | None  # 0 on RoCE (Ethernet), where the GID names the port
    qpn: str | None
    gid: str | None


class FabricMeasure(TypedDict):
    """One perftest run of one pair on one rail, as this host's process saw it."""

    round: int
    rail: int
    hca: str
    peer: str
    peer_hca: str | None
    role: str  # server | client
    test: str  # ib_write_bw | ib_write_lat | ib_send_bw
    kind: str  # bw | lat
    extra: bool  # a re-pairing round
    value: float | None  # bw: Gb/s (the largest message's average); lat: typical microseconds
    p99_us: float | None  # latency tests: the 99th percentile
    size: int | None
    use_cuda: int | None  # the GPU ordinal of GPU memory buffers; None: host memory
    gdr_error: str | None  # --use_cuda failed (then run again from host memory)
    error: str | None  # no figure: why
    error_kind: str | None  # connect | gdr | device | resources | bind | timeout | missing
    # the whole run as perftest printed it (issue 48): both roads fill these from the same
    # parser (textparse/perftest.py:run_figures); absent in runs stored before
    peak_gbps: NotRequired[float | None]  # bw: the largest message's peak
    msg_rate_mpps: NotRequired[float | None]
    latency: NotRequired[dict[str, float | None] | None]  # lat: t_min_us ... t_p999_us of `size`
    link_type: NotRequired[str | None]  # IB | Ethernet, as the banner's `Link type` says
    remote: NotRequired[PerftestAddress | None]  # the peer's queue pair as printed (LID, QPN, GID)
    unit: NotRequired[str | None]  # the bandwidth column's unit as printed (MB/sec, MiB/sec, Gb/sec)
    rows: NotRequired[list[dict[str, Any]]]  # every size row: size, iters, then Gb/s or usec figures


class FabricNcclGroup(TypedDict):
    """One multi-host NCCL communicator this host took part in."""

    group: str  # "rail0", "all", "bisect:rail1:2" ...
    kind: str  # rail | all | bisect | text
    rail: int | None
    hca: str | None
    members: list[str]  # hosts, in rank order
    ranks: int | None
    transport: str | None  # NET/IB, NET/IB/GDRDMA, NET/Socket ...
    gdr: bool | None  # NCCL moved data with GPUDirect RDMA (GDRDMA in its channel lines)
    busbw_gbps: float | None  # all_reduce bus bandwidth of the largest message
    results: list[NcclResult]
    wrong: int | None  # wrong elements over every verified result
    error: str | None


class FabricGdr(TypedDict):
    expected: bool | None  # GPUs and HCAs here, and nvidia_peermem / DMA-BUF says GPUDirect RDMA is there
    why: str
    nvidia_peermem: bool | None
    nv_peer_mem: bool | None
    dmabuf: bool | None


class FabricPlan(TypedDict):
    hosts: int
    rails: int
    rounds: int  # the first wave's rounds
    extra_rounds: int  # re-pairing rounds run
    round_s: float
    budget_s: float
    tests: list[str]
    spec: dict[str, Any]


class FabricFacts(TextOrigin):
    source: str  # "probe" | "text"
    skipped: str | None  # why this host took no part (busy GPUs, no port), None: it did
    hcas: list[FabricHca]
    gpus: list[dict[str, Any]]
    gdr: FabricGdr | None
    perftest: dict[str, Any]  # tools found, built with CUDA (cuda), with --use_cuda_dmabuf (dmabuf), missing
    measurements: list[FabricMeasure]
    nccl: list[FabricNcclGroup]
    plan: FabricPlan | None
    errors: list[str]  # what of this host's fabric processes failed, one line each
    # what of this host's answers the plan refused (a round, peer, role or test it was not given, a
    # result twice, an address that is none): dropped before judging, one line each (at most 8, then a count)
    refused: NotRequired[list[str]]


# ---------------------------------------------------------------------------------------------
# The facts mapping and the fleet.json host record


class Facts(TypedDict, total=False):
    """hosts[].facts: one key per section that could be normalized (facts/registry.py)."""

    host: HostFacts
    pcie: PcieFacts
    gpus: GpusFacts
    nvlink: NvlinkFacts
    topology: TopologyFacts
    p2p: P2pFacts
    nccl: NcclFacts
    kmsg: KmsgFacts
    nic: NicFacts
    fabric: FabricFacts


class ProbeRecord(TypedDict, total=False):
    outcome: str
    reason: str
    duration_s: float | None
    probe_version: str | None
    retried: int


# One entry of fleet.json's `hosts` (verdict/judge.py writes it).  Functional form: `class` is a
# Python keyword, which a TypedDict class body cannot declare.
HostRecord = TypedDict("HostRecord", {
    "name": str,
    "address": "str | None",
    "groups": "list[str]",
    "outcome": str,
    "reason": str,
    "probes": "dict[str, ProbeRecord]",
    "facts": Facts,
    "normalize_errors": "list[str]",
    "fingerprint": "str | None",
    "class": "str | None",
})


# ---------------------------------------------------------------------------------------------
# A host's facts from the previous run, as the checks get them (verdict/checks/base.py:HostView.previous):
# only what api/session.py:previous_facts keeps of fleet.json (HISTORY_SECTIONS whole, HISTORY_PARTS
# cut to the keys named there), so a check cannot read a section the previous run never hands on.


class PreviousPcie(TypedDict, total=False):
    aer_links: list[AerLink]


class PreviousNvlink(TypedDict, total=False):
    gpus: list[NvlinkGpu]


class PreviousFacts(TypedDict, total=False):
    kmsg: KmsgFacts
    nic: NicFacts
    gpus: GpusFacts
    pcie: PreviousPcie
    nvlink: PreviousNvlink
