"""The `host.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

BOARD_MISMATCH = Rule(
    "host.board.mismatch",
    action=Action.RMA,
    because="DMI board vendor/model differ from the order: another product was delivered",
    needs=Needs(sections=("host",), expect=("board_vendor", "board_model")),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="DMI board vendor or model does not contain `probe_expect.board_vendor` / `board_model`",
        todo="check the machine against the order; the vendor shipped another board",
    ),
)

VIRTUALIZED = Rule(
    "host.virtualized",
    action=Action.NONE,
    because="a hypervisor: the topology is what it exposes",
    needs=Needs(sections=("host",)),
    host_wide=True,
    doc=Doc(
        severity="info; fail with `virtualization: none`; warn when only the PCI bus shows emulation",
        kind="platform_limitation; fault when bare metal was required",
        means="the host runs under a hypervisor (DMI, CPU flag), or its PCI bus is emulated "
        "(QEMU/virtio host bridge) while the host reports none",
        todo="topology findings describe the VM; ask for bare metal if you need the physical topology",
    ),
)

DRIVER_MISSING = Rule(
    "host.driver.missing",
    action=Action.CONFIGURE,
    because="GPUs on the bus, no /proc/driver/nvidia: the driver is not installed or loaded",
    needs=Needs(sections=("host",), expect=("gpu_count",)),
    host_wide=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="GPUs are expected but `/proc/driver/nvidia/version` is absent",
        todo="`modprobe nvidia`, install the driver",
    ),
)

DRIVER_VERSION = Rule(
    "host.driver.version",
    action=Action.CONFIGURE,
    because="the loaded driver is outside the written driver_min/driver_max",
    needs=Needs(sections=("host",), expect=("driver_min", "driver_max")),
    host_wide=True,
    doc=Doc(
        severity="fail below `driver_min`, warn above `driver_max`",
        kind="fault",
        means="the loaded NVIDIA driver is outside the written range",
        todo="upgrade, or pin the validated version",
    ),
)

KERNEL_LOG_UNREADABLE = Rule(
    "host.kernel_log.unreadable",
    action=Action.CONFIGURE,
    because="no kernel-log source was readable by the probe user",
    needs=Needs(sections=("kmsg",), unreadable_ok=True),
    host_wide=True,
    doc=Doc(
        severity="warn; info in a container",
        kind="unknown; platform_limitation in a container",
        means="no kernel-log source could be read (journalctl, /dev/kmsg, dmesg): XIDs, AER and"
        " NIC events are not judged; the message lists each source and why",
        todo="add the probe user to `systemd-journal`/`adm`, or `become: true`",
    ),
)

SEGFAULT_GPU_LIBRARY = Rule(
    "host.segfault.gpu_library",
    action=Action.CONFIGURE,
    because="processes crashed inside libnccl/libcuda: user-space and driver versions",
    needs=Needs(sections=("kmsg",)),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="processes of this boot segfaulted inside libnccl / libcuda (kernel log), per "
        "library with the processes",
        todo="check the CUDA/NCCL user-space versions against the driver; look for Xids at the same time",
    ),
)

REPEAT_OFFENDER = Rule(
    "host.repeat_offender",
    action=Action.RMA,
    because="the same fault came back or flapped over recent runs: the fix does not hold",
    needs=Needs(),
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="a fail finding raised in 3 or more of those runs and cleared in between (it came"
        " back), or a warn/fail finding whose presence changed 3 or more times (it "
        "flaps); the message marks each run (x raised, . clear) and the evidence names "
        "them",
        todo="the usual fix does not hold: take the host out of service and escalate (hardware "
        "investigation, RMA)",
    ),
)
