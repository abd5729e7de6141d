"""The `fabric.*` finding rules: one declaration each (verdict/rule.py says what one holds).

docs/findings.md's catalog rows are rendered from these declarations (tests/verdict/test_rules.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from orchestrator.verdict.causes import Cause, Scope
from orchestrator.verdict.findings import Action, Kind
from orchestrator.verdict.rule import Doc, Needs, Rule, follows
from orchestrator.verdict.rules import gpu, nic

HOST_SLOW = Rule(
    "fabric.host.slow",
    action=Action.RESEAT_INSPECT,
    because="slow with its peers on every rail: what its HCAs share (PCIe root, BIOS, NUMA, memory)",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="the host is slow with its peers on every rail while they are fast with others: "
        "the host, not one HCA (the HCAs' PCIe links in the evidence)",
        todo="what the HCAs share: PCIe root complex, BIOS, CPU frequency, NUMA, memory, IOMMU",
    ),
)

HCA_SLOW = Rule(
    "fabric.hca.slow",
    action=Action.RESEAT_INSPECT,
    because="one HCA slow with peers that are fast with others: its cable, transceiver or switch port",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    fleet=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="one HCA (rail) of the host is slow with its peers while they are fast with "
        "others; its PCIe link named (downtrained or not)",
        todo="reseat/replace cable or transceiver, the switch port's counters, `mlxlink -d`; "
        "reseat a downtrained card",
    ),
)

PATH_SLOW = Rule(
    "fabric.path.slow",
    action=Action.NONE,
    because="two ports slow only together: the route between them, not either host",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    fleet=True,
    fabric=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="two ports are slow only together (raised on both hosts): the path between them; "
        "both ports' LID and GUID named",
        todo="`ibtracert` between the LIDs; the inter-switch link or route; the switches' port counters",
    ),
)

RAIL_SLOW = Rule(
    "fabric.rail.slow",
    action=Action.NONE,
    because="a rail slow for most of its pairs: its switches or routing, not the hosts",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    fleet=True,
    fabric=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="a rail is slow for most of its pairs (raised on every host of the rail): its "
        "switches, not the hosts",
        todo="the rail's leaf/spine switches, firmware, adaptive routing, the subnet manager's routing",
    ),
)

SLOW_UNLOCALISED = Rule(
    "fabric.slow.unlocalised",
    action=Action.NONE,
    because="slow pairs the rounds could not pin on a host: more rounds",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    fleet=True,
    fabric=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="slow pairs the rounds could not pin on a host, its peer or the path",
        todo="raise `fabric.extra_rounds` or `fabric.rounds`",
    ),
)

GDR_MISSING = Rule(
    "fabric.gdr.missing",
    action=Action.CONFIGURE,
    because="GPU memory could not be registered for RDMA: the peer-memory module or DMA-BUF",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="GPUDirect RDMA is expected (nvidia_peermem / nv_peer_mem loaded, or DMA-BUF) but"
        " `--use_cuda` could not register GPU memory or NCCL ran NET/IB without GDRDMA",
        todo="nvidia_peermem matching the driver, IOMMU, ACS, NCCL_NET_GDR_LEVEL",
    ),
)

STEP_FAILED = Rule(
    "fabric.step.failed",
    action=Action.NONE,
    because="the host's fabric processes gave no figure: rerun, check the rail addresses",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="the host's fabric processes gave no figure (a tool failed, a peer never came, "
        "the wave failed)",
        todo="run perftest by hand between the hosts; check the rail addresses",
    ),
)

NCCL_SLOW = Rule(
    "fabric.nccl.slow",
    action=Action.RESEAT_INSPECT,
    because="a multi-host all_reduce below the ports' line rate, bisected to this host",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    # bisected to a host it is that host's; slow with no host or pair to explain it, the ring's
    fabric_when=lambda f: f.kind is Kind.UNKNOWN,
    doc=Doc(
        severity="fail (bisected to a host); warn (unknown) when no host or pair explains it",
        kind="fault; unknown",
        means="a rail-aligned (or all-GPU) all_reduce across hosts below 70 % of the member "
        "ports' line rate, that no pairwise finding explains",
        todo="the host the bisection names: its HCA, cable, PCIe link; install perftest to localise further",
    ),
)

NCCL_DATA_WRONG = Rule(
    "fabric.nccl.data_wrong",
    action=Action.RESEAT_INSPECT,
    because="a multi-host collective returned wrong elements",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="a multi-host all_reduce or all_gather returned wrong elements (raised on every "
        "member when most members' records say so; on the member alone when only a "
        "minority says so)",
        todo="silent corruption between hosts: test their HCAs and GPUs pairwise",
    ),
)

NCCL_TRANSPORT = Rule(
    "fabric.nccl.transport",
    action=Action.CONFIGURE,
    because="NCCL moved data between hosts over sockets though HCAs are there",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="fail",
        kind="fault",
        means="NCCL moved data between hosts over sockets though InfiniBand HCAs are there",
        todo="NCCL_IB_DISABLE, NCCL_IB_HCA, libibverbs / rdma-core in the jobs' environment",
    ),
)

ANSWER_REFUSED = Rule(
    "fabric.answer.refused",
    action=Action.NONE,
    because="the host answered outside its plan: its answers were dropped, nothing to fix on its peers",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="the host answered outside its plan (a round, peer, role or test it was not "
        "given, a result twice, a rail address that is no address, an NCCL record longer "
        "than the plan): dropped before judging, raised on the host that sent it only",
        todo="what runs on the host: its probe, its tools; raw/<host>/fabric.json",
    ),
)

ANSWER_DISTRUSTED = Rule(
    "fabric.answer.distrusted",
    action=Action.NONE,
    because="the host's own pair figures cannot be right: they were left out, nothing to fix on its peers",
    needs=Needs(sections=("fabric",)),
    held_back=True,
    host_wide=True,
    fleet=True,
    doc=Doc(
        severity="warn",
        kind="unknown",
        means="figures the host printed for its pair tests cannot be measurements (bandwidth over "
        "its own port's line rate, a latency under 0.1 us, a message size the plan did not "
        "ask for, a row the parser refuses: negative, NaN, inf), or they disagree with what at least two peers printed of the same "
        "transfers while those peers agree with others: left out before judging, raised on "
        "that host only; a disagreement with one peer alone names neither end",
        todo="what runs on the host: its probe, its perftest build; raw/<host>/fabric.json",
    ),
)


def causes() -> Iterator[Cause]:
    """Which findings of a host these rules' findings follow from (verdict/causes.py), each
    consequence's roots in the order they are preferred."""
    yield from follows(HCA_SLOW, (nic.PORT_RATE_LOW,), scope=Scope.DEVICE)
    yield from follows(GDR_MISSING, (gpu.GDR_PEERMEM_ERROR,))
