"""The `pcie.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action
from orchestrator.verdict.rule import Doc, Needs, Rule, follows

NIC_COUNT = Rule(
    "pcie.nic.count",
    action=Action.RESEAT_INSPECT,
    because="NICs on the bus differ from nic_count",
    needs=Needs(sections=("pcie",), expect=("nic_count",)),
    host_wide=True,
    doc=Doc(
        severity="fail when fewer, warn when more",
        kind="fault",
        means="NICs (physical functions) on the PCI bus differ from `probe_expect.nic_count`",
        todo="a missing NIC is unseated, disabled in the BIOS or dead; compare `lspci` with the order",
    ),
)

LINK_DOWNGRADED = Rule(
    "pcie.link.downgraded",
    action=Action.RESEAT_INSPECT,
    because="a link trained below its maximum or the written generation/width",
    needs=Needs(any_of=("pcie", "gpus")),
    held_back=True,
    doc=Doc(
        severity="fail below `pcie_width`, or below `pcie_gen` where both ends cannot reach it; warn"
        " when the width (or a non-GPU's speed) is below what both ends support, or (no `pcie_gen`"
        " written) when a GPU advertises a lower generation than its model (`gpu_models.py`) in a"
        " slot that can do more; info for a GPU whose speed alone is low at full width (resting"
        " while idle, `pcie_gen` written or not), and for a GPU whose slot cannot reach its"
        " model's generation",
        kind="fault; unknown for idle speed; platform_limitation when the slot limits the GPU",
        means="a PCIe link trained below its maximum, below the written requirement, or below "
        "the GPU model's generation; `expected`/`actual` as `Gen5 x16` / `Gen1 x8 (2.5 "
        "GT/s)`; the message says when the slot is the limit",
        todo="reseat card/riser, BIOS bifurcation and slot settings; re-check a GPU's speed "
        "under load; a slot limit needs another platform (or write `pcie_gen` to accept "
        "it)",
    ),
)

NIC_SHARED_SWITCH = Rule(
    "pcie.nic.shared_switch",
    action=Action.RESEAT_INSPECT,
    because="a NIC shares a GPU's switch uplink not by design: move it",
    needs=Needs(sections=("pcie",)),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="a NIC shares a GPU's switch uplink not by design (other GPUs have no NIC on "
        "theirs, or more GPUs per NIC than `gpu_count/nic_count`)",
        todo="move the NIC to its own slot, or declare `gpu_nic_level` if the pairing is intended",
    ),
)

ACS_ENABLED = Rule(
    "pcie.acs.enabled",
    action=Action.CONFIGURE,
    because="ACS redirect on switch ports between GPUs/NICs",
    needs=Needs(sections=("pcie",)),
    doc=Doc(
        severity="fail on bare metal; info in a VM",
        kind="fault / platform_limitation",
        means="ACS RR/CR/EC enabled on a switch downstream port above a GPU whose switch also "
        "holds another GPU or NIC: P2P is redirected through the root complex (skipped "
        "with `acs_allowed: true`)",
        todo="`pci=disable_acs_redir=` or clear ACS control on bare metal",
    ),
)

CONFIG_NEEDS_ROOT = Rule(
    "pcie.config.needs_root",
    action=Action.NONE,
    because="config space readable by root only",
    needs=Needs(sections=("pcie",)),
    host_wide=True,
    doc=Doc(
        severity="info",
        kind="unknown",
        means="PCIe config space read as 64 bytes (non-root): port types inferred, ACS not judged",
        todo="run the pcie probe with become",
    ),
)

GPU_NIC_AFFINITY = Rule(
    "pcie.gpu_nic.affinity",
    action=Action.RESEAT_INSPECT,
    because="a GPU without a NIC at the written level",
    needs=Needs(any_of=("pcie", "topology"), expect=("gpu_nic_level",), gpus=True),
    host_wide_when="the placement on a C2C host is not known from a matrix",
    doc=Doc(
        severity="fail",
        kind="fault",
        means="`probe_expect.gpu_nic_level` is set and a GPU has no NIC at that level or closer"
        " (`actual` = its nearest); from the PCIe probe's levels, else from the `topo -m`"
        " matrix (`facts.topology`, e.g. a text import) when it has GPU x NIC cells; a "
        "GPU on NVLink-C2C (Grace: GH200, GB200, GB10, or GPU memory that is its own NUMA"
        " node) passes with a NIC on its own CPU (NODE), and from a `topo -m` matrix "
        "alone (SYS for every such cell) it is unknown (info)",
        todo="check NIC placement against the design",
    ),
)

AER = Rule(
    "pcie.aer",
    action=Action.RESEAT_INSPECT,
    because="AER errors in this boot",
    needs=Needs(sections=("kmsg",)),
    host_wide_when="the kernel event names no bus id",
    doc=Doc(
        severity="fail (uncorrected), warn (10+ corrected in one boot; not repeated when none is "
        "new since the previous run of the boot)",
        kind="fault",
        means="PCIe AER errors reported for a device in this boot",
        todo="check the device, its slot and link partner; marginal links: riser, cable",
    ),
)

AER_COUNTERS = Rule(
    "pcie.aer.counters",
    action=Action.RESEAT_INSPECT,
    because="AER counters on a GPU's or NIC's upstream links",
    needs=Needs(sections=("pcie",)),
    held_back=True,
    doc=Doc(
        severity="fail (a fatal count on a link); warn (non-fatal growth, or correctable growth "
        "since the previous run of the boot of 10 per Gen4 x16 link, scaled to the link's "
        "lanes × GT/s: 20 on Gen5 x16, 1 on Gen1 x4)",
        kind="fault",
        means="AER counters in sysfs (`aer_dev_correctable/fatal/nonfatal`, Linux 5.8+) of both"
        " ends of each link on a GPU's or NIC's upstream chain (errors are often counted "
        "at the switch or root port above); the subject names the link and its trained "
        "generation and width",
        todo="reseat the card or riser, check the slot and switch; re-check the link's speed and width",
    ),
)

REPLAYS = Rule(
    "pcie.replays",
    action=Action.RESEAT_INSPECT,
    because="the GPU's PCIe replay counter grew",
    needs=Needs(sections=("gpus",), gpus=True),
    doc=Doc(
        severity="warn",
        kind="fault",
        means="NVML's PCIe replay counter of the GPU grew since the previous run of the same "
        "boot (cumulative: never judged as an absolute)",
        todo="check riser/slot and the AER counters along the GPU's upstream chain",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(ACS_ENABLED, (ACS_ENABLED,))
    yield from follows(AER, (AER_COUNTERS,), scope=Scope.DEVICE)
    yield from follows(REPLAYS, (AER_COUNTERS,), scope=Scope.DEVICE)
