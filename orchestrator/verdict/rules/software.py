"""The `software.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule

VERSION_OUTLIER = Rule(
    "software.version.outlier",
    action=Action.CONFIGURE,
    because="driver/CUDA/kernel/BIOS/VBIOS differ from the host's peers",
    needs=Needs(any_of=("host", "gpus")),
    host_wide=True,
    doc=Doc(
        severity="info (another version than the peers' is no fault while it is in support: `driver_min` "
        "and the security floor fail what is not)",
        kind="fault",
        means="driver, CUDA driver version, kernel, BIOS, VBIOS or InfoROM image differs from "
        "what most of the host's peers (same board and GPUs, 3+ hosts) run (fleet check)",
        todo="bring the host to the fleet's version, or pin the difference",
    ),
)

SECURITY_DRIVER = Rule(
    "software.security.driver",
    action=Action.CONFIGURE,
    because="the driver lacks the fixes of an NVIDIA security bulletin",
    needs=Needs(any_of=("host", "gpus"), switched_on=("security_floor",)),
    host_wide=True,
    doc=Doc(
        severity="fail; info (unknown) for a branch newer than every branch of the floor file",
        kind="fault; unknown",
        means="the loaded driver (/proc, else NVML) is older than the fixed version of its "
        "branch in one or more GPU Display Driver bulletins; the message names the newest"
        " such bulletin, the CVEs and the branch's floor",
        todo="install the branch's fixed version (or a branch NVIDIA still lists) and reboot",
    ),
)

SECURITY_BRANCH = Rule(
    "software.security.branch",
    action=Action.CONFIGURE,
    because="the driver's branch gets no more security fixes",
    needs=Needs(any_of=("host", "gpus"), switched_on=("security_floor",)),
    host_wide=True,
    doc=Doc(
        severity="warn",
        kind="fault",
        means="the driver is at its branch's floor, but the newest bulletin no longer lists the"
        " branch (or no bulletin of the file ever did): vulnerabilities found since are "
        "not fixed on it",
        todo="move to a branch the newest bulletin lists",
    ),
)

SECURITY_FIRMWARE = Rule(
    "software.security.firmware",
    action=Action.CONFIGURE,
    because="the adapter firmware lacks the fixes of an NVIDIA bulletin",
    needs=Needs(sections=("nic",), switched_on=("security_floor",)),
    doc=Doc(
        severity="fail",
        kind="fault",
        means="ConnectX / BlueField firmware (family from the firmware's first number) older "
        "than the first fixed build of its train, or on a train that got no fix, in a "
        "networking bulletin; one finding per firmware version, naming its adapters",
        todo="update the adapter firmware (mlxup / mlxfwmanager) to its train's fixed build, "
        "then reset the adapter or reboot",
    ),
)
